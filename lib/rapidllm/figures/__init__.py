"""One function per figure; each writes PNG and PDF and returns nothing."""
