"""What every Poolscope process is built on: its HTTP server's hardening, its flag
types and its ids."""
