"""What a run leaves behind for apps and people: the manifest and the summaries."""
