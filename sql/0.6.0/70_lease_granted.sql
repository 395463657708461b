
/* the lease_ttl each host's lease was granted for (worker.sql, _expire_leases) */
ALTER TABLE frameq.host ADD COLUMN lease_granted interval;
/*
 * Leases held across the upgrade: what their grant was, or more where the
 * worker re-armed it after a start (so never less); lease_ttl is at most
 * an hour, and so is every grant
 */
UPDATE frameq.host
   SET lease_granted = least(greatest(lease_expires_at - last_renewal_at, interval '0'), interval '1 hour')
 WHERE lease_expires_at IS NOT NULL AND last_renewal_at IS NOT NULL;
