"""Media a person looks at: H.264 video a browser plays, event snapshots and clips."""
