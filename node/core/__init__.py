"""The node's core: the server shell, clients, command dispatch, the keyspace, configuration and error texts."""
