"""Storage adapters: the only package that imports rocksdict."""

from processors.native import prefer_compiled

prefer_compiled(__path__, "state")
