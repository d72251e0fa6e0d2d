"""One router per resource: parse, call one service (or read the views), answer."""
