"""Security: who a connection is (principals from TLS certificates and SASL), what it may do (the
authorizer and its ACLs) and how fast it may go (client quotas)."""
