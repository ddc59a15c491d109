"""The status tool: a pool table for people, as a page, a terminal view and JSON."""
