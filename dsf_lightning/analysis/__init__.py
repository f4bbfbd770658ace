"""Analysis tools for trained recurrent models: :mod:`.dfa` (automata extracted from sr-RNNs)."""
