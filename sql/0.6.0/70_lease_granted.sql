
/* the lease_ttl each host's lease was granted for (worker.sql, _expire_leases) */
ALTER TABLE frameq.host ADD COLUMN lease_granted interval;
