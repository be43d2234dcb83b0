
SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

CREATE TABLE public.ate_ledger_meta (
    name text NOT NULL,
    value bigint NOT NULL
);

CREATE TABLE public.ate_ledger_records (
    scope text NOT NULL,
    id text NOT NULL,
    version bigint NOT NULL,
    open boolean NOT NULL,
    ended_at timestamp with time zone,
    record text NOT NULL,
    incarnation bigint
);

INSERT INTO public.ate_ledger_meta VALUES ('incarnation_column', 1);
INSERT INTO public.ate_ledger_meta VALUES ('schema_version', 1);

INSERT INTO public.ate_ledger_records VALUES ('ip:127.0.0.1', 'fx-success', 3, false, '2026-12-07 21:01:34.19414+00', '{"key":{"scope":"ip:127.0.0.1","id":"fx-success"},"fingerprint":"sha256:b6d31beb9ed21c847d358a47a7a4ae72f752a96f281b0fadcd006f7ce4e83747","state":{"state":"succeeded","outcome":"{\"status\":200,\"headers\":[],\"text\":\"{\\\"provider\\\":\\\"ok\\\",\\\"receipt\\\":\\\"rcpt-82bc2e3b5f5eb7412f3f143ef273e140adb5b232be31d68424d41fceb727fd74\\\"}\"}"},"version":3,"lease":null,"tries":[{"id":1,"started_at":"2026-12-07T21:01:34.190524Z","dispatched_at":"2026-12-07T21:01:34.191918893Z","closed":["2026-12-07T21:01:34.194140647Z","succeeded"]}],"created_at":"2026-12-07T21:01:34.190524Z","ended_at":"2026-12-07T21:01:34.194140647Z","incarnation":1691754063301576379}', 1691754063301576379);
INSERT INTO public.ate_ledger_records VALUES ('ip:127.0.0.1', 'fx-rejected', 3, false, '2026-12-07 21:01:34.209166+00', '{"key":{"scope":"ip:127.0.0.1","id":"fx-rejected"},"fingerprint":"sha256:b6d31beb9ed21c847d358a47a7a4ae72f752a96f281b0fadcd006f7ce4e83747","state":{"state":"failed_at_provider","outcome":"{\"status\":502,\"headers\":[],\"text\":\"{\\\"outcome\\\":{\\\"provider\\\":\\\"rejected\\\",\\\"reason\\\":\\\"simulated rejection\\\"},\\\"state\\\":\\\"failed_at_provider\\\"}\"}"},"version":3,"lease":null,"tries":[{"id":1,"started_at":"2026-12-07T21:01:34.206441Z","dispatched_at":"2026-12-07T21:01:34.207240252Z","closed":["2026-12-07T21:01:34.209166574Z","failed_at_provider"]}],"created_at":"2026-12-07T21:01:34.206441Z","ended_at":"2026-12-07T21:01:34.209166574Z","incarnation":5529624899817118896}', 5529624899817118896);
INSERT INTO public.ate_ledger_records VALUES ('ip:127.0.0.1', 'fx-credential_error', 2, false, '2026-12-07 21:01:34.222728+00', '{"key":{"scope":"ip:127.0.0.1","id":"fx-credential_error"},"fingerprint":"sha256:b6d31beb9ed21c847d358a47a7a4ae72f752a96f281b0fadcd006f7ce4e83747","state":{"state":"failed_pre_provider","reason":"credential error"},"version":2,"lease":null,"tries":[{"id":1,"started_at":"2026-12-07T21:01:34.221518Z","dispatched_at":null,"closed":["2026-12-07T21:01:34.222728796Z","pre_provider_failure"]}],"created_at":"2026-12-07T21:01:34.221518Z","ended_at":"2026-12-07T21:01:34.222728796Z","incarnation":16784031259405833111}', -1662712814303718505);
INSERT INTO public.ate_ledger_records VALUES ('ip:127.0.0.1', 'fx-timeout', 3, false, '2026-12-07 21:01:34.239233+00', '{"key":{"scope":"ip:127.0.0.1","id":"fx-timeout"},"fingerprint":"sha256:b6d31beb9ed21c847d358a47a7a4ae72f752a96f281b0fadcd006f7ce4e83747","state":{"state":"provider_unavailable","reason":"provider timed out"},"version":3,"lease":null,"tries":[{"id":1,"started_at":"2026-12-07T21:01:34.235903Z","dispatched_at":"2026-12-07T21:01:34.237098568Z","closed":["2026-12-07T21:01:34.239233109Z","provider_unavailable"]}],"created_at":"2026-12-07T21:01:34.235903Z","ended_at":"2026-12-07T21:01:34.239233109Z","incarnation":465712570743673723}', 465712570743673723);

ALTER TABLE ONLY public.ate_ledger_meta
    ADD CONSTRAINT ate_ledger_meta_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.ate_ledger_records
    ADD CONSTRAINT ate_ledger_records_pkey PRIMARY KEY (scope, id);

CREATE INDEX ate_ledger_records_ended ON public.ate_ledger_records USING btree (ended_at) WHERE (NOT open);

CREATE INDEX ate_ledger_records_open ON public.ate_ledger_records USING btree (scope, id) WHERE open;

