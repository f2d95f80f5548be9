"""Storage adapters: the only package that imports rocksdict."""
