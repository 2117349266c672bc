"""Network edge helpers: the address policy that keeps the crawler off private networks."""
