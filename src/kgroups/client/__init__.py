"""The member side of kgroups: joining groups, assignors, the sidecar."""
