"""Framework callbacks and metric exporters for ddpdoctor.watch (each imported on use)."""
