"""Controller role: validates topic, partition and config changes and turns them into metadata records."""
