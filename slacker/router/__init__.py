"""`slacker router`: one MySQL-protocol address for every tenant.

The data path is a compiled program (router/ in the repository, Go standard library only,
built by scripts/install); this package is its control side: it follows the directory,
fetches each tenant's credentials from the owner's agent, hands the data path routes with
the double-SHA1 password hash only, and reads its status and metrics. See docs/router.md.
"""
