"""The commands (`orch ...`) and what they print: the top layer, which calls the stages below."""
