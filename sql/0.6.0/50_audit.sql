
/* the audit trail (schema.sql, admin.sql "The audit trail") */
CREATE TABLE frameq.action (
	id			bigserial NOT NULL,
	at			timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	role		text NOT NULL DEFAULT session_user,
	action		text NOT NULL CHECK (action OPERATOR(pg_catalog.~) '^[a-z_]{1,64}$'),
	job			bigint,
	layer		bigint,
	frame		bigint,
	host		int,
	detail		jsonb NOT NULL DEFAULT '{}' CHECK (pg_catalog.jsonb_typeof(detail) = 'object')
);
CREATE INDEX action_job ON frameq.action (job, id) WHERE job IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('frameq.action', '');
SELECT pg_catalog.pg_extension_config_dump('frameq.action_id_seq', '');
