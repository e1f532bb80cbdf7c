"""Local evaluate module (the script is accuracy.py)."""
