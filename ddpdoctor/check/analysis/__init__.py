"""Pure analysis: evidence in, findings out. No processes, sockets or torch here."""
