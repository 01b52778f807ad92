"""CRI (runtime.v1): the project's own proto, generated stubs, typed async clients and error mapping."""
