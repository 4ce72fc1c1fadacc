"""The event core shared by the proxy and the node: sockets served without a trio task switch
per read or write. It knows neither package.

- ``poller.py``: one epoll set served by one trio task; a socket's owner task parks while the
  poller reads it and calls its handler synchronously with the bytes, and is woken with a
  value (or EOF, or an error) when it must take over. A handler that raises is logged and closes only its own connection.
- ``writer.py``: a socket's output queue, written with one non-blocking ``send`` at the end
  of a batch; what the kernel does not take is sent by a trio task, in order.
- ``sockets.py``: a connected socket taken over from trio (its ``recv``/``send`` are called
  directly) and closed so that a task waiting on it wakes.
- ``listen.py``: listening sockets (Redis' ``bind`` words or a host name, optional
  SO_REUSEPORT) and the accept loop.
- ``backoff.py``: the exponential backoff every retry and reconnect uses.
"""
