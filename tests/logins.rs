//! Every client logs in through strongsync with its defaults, on MariaDB 10.11 and MySQL 9.7:
//! after `FLUSH PRIVILEGES` and right after a promote (a cold `caching_sha2_password` cache on
//! MySQL), with TLS on both legs by default and no password in clear on any leg. MySQL offers
//! TLS from its first start, so there every account may log in only over TLS, which proves
//! strongsync's own legs to the servers are TLS whatever the client's is.

use support::each_server;
use support::logins::every_client_logs_in_after_a_flush_and_a_promote;

each_server!(every_client_logs_in_after_a_flush_and_a_promote);
