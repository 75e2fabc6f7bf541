-- Runs once, when the PostgreSQL volume is first initialised: the login Grafana's PostgreSQL
-- data source uses. It gets no privilege here; the controller's store migration (version 7)
-- grants it SELECT on the result views only (fleetbench_jobs, fleetbench_level_results,
-- fleetbench_compare_levels, fleetbench_suite_runs, fleetbench_regression_runs), never on the tables behind them.
-- Change the password for anything but a laptop (and in dashboards/provisioning too).
CREATE ROLE fleetbench_grafana LOGIN PASSWORD 'fleetbench-grafana';
