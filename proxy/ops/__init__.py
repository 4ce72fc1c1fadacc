"""Operations around the request path: configuration, metrics, workers, the operator command."""
