"""PostgreSQL, the source of truth: schema, migrations and the queries the kit runs.

Each repository function is one transaction; time that decides something is the
database's (`coalesce(:now, now())`), so tests and the model can pass an explicit one.
"""
