"""Local evaluate module (the script is xsim.py)."""
