"""What both bridges are built from: the Prometheus client, the snapshot cache, the
summary contract and its builder, the app skeleton and the command line they share."""
