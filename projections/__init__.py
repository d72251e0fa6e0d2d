"""The read side (CQRS): the store and engine that apply the log to views (`store`), the
views themselves (`views`), and the reports computed from them (`reports`)."""
