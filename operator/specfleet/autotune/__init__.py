"""Finding the best speculative config by measurement: experiments over candidates, load-aware depth."""
