"""ATC, CANN's model compiler: its options, running it, and what its error codes mean."""
