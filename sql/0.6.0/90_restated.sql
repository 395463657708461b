/*
 * Every function, view and trigger that 0.6.0 adds or changes, in its final
 * form (sql/src/), in the install script's order; what 0.6.0 removes is
 * dropped first.  Functions new in 0.6.0 are revoked from PUBLIC at the
 * end; the pieces after this one grant those of the public API.
 * Generated from the topic files: edit those.
 */
