"""The web UI: a read-only JSON API over the store and the pages that use only it.

`api` names what each route answers (`listing` the sessions list, `summary` a session's
page, `flames` flame graphs and diffs, `refs` how sessions are named); `routes` maps URL
paths to them; `server` serves them with the standard library for `kubeprof ui`, and the
operator mounts the same routes on its HTTP server.
"""
