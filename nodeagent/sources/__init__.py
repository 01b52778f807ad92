"""Pod sources: the apiserver (pods bound to this node), the static pod directory (`file`) and URL (`url`)."""
