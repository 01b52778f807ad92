"""Pod sources: the apiserver (pods bound to this node); static directory and URL sources come with their issue."""
