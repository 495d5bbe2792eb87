"""The node agent of one ProfilingSession: discovery, collection, spool and shipping."""
