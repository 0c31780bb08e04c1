"""Framework callbacks for ddpdoctor.watch: Lightning, HF Trainer, accelerate (each
imported on use)."""
