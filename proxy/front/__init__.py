"""The client side of the proxy: the listener, each client's session, commands answered locally, transactions and blocking commands, pub/sub."""
