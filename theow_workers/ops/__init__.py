"""Operations: logs, Flower, ``theow doctor`` and the domain's Prometheus metrics."""
