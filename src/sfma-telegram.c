/* sfma-telegram - bridge a workspace's mailbox to one Telegram chat.
 *
 *   sfma-telegram [--once] [--poll-timeout SECONDS] WORKSPACE
 *
 * Long-polls the Bot API's getUpdates and turns each text message of the
 * chat named by TELEGRAM_CHAT_ID into one inbox file; sends each outbox
 * message to that chat with sendMessage. Without TELEGRAM_CHAT_ID it only
 * prints the chat ids it sees (discovery) and writes nothing.
 *
 * Delivery order, so that kill -9 at any instant neither loses nor repeats
 * an operator message (sfma-telegram(1) has the argument in full):
 *   1. getUpdates(offset) - Telegram forgets updates only once a later call
 *      carries a higher offset, so until step 3 nothing is acknowledged;
 *   2. each accepted message is written to .sfma/telegram.spool/NAME;
 *   3. the new offset is saved (the commit point) in .sfma/telegram.state;
 *   4. each spooled NAME is renamed into .sfma/inbox/NAME.
 * A spool file whose update id is below the saved offset is committed and
 * is delivered by rename on restart; one at or above it is uncommitted and
 * is removed, since Telegram serves that update again. rename(2) moves a
 * file atomically, so a message is in the spool or in the inbox, never in
 * both: the engine can consume it only once.
 *
 * Outbox messages are at least once: the name being sent is saved before
 * sendMessage, marked sent after it returned ok. A kill between the two
 * sends it again on restart, marked as a possible repeat. Losing a question
 * would stall the agent; a labelled repeat costs the operator one glance.
 *
 * Exit status: 0 after --once or on SIGINT/SIGTERM, 1 on an error, 2 on a
 * usage or configuration error. */
#include "atomic.h"
#include "buf.h"
#include "cli.h"
#include "confine.h"
#include "clock.h"
#include "errors.h"
#include "mailbox.h"
#include "ndjson.h"
#include "statefile.h"
#include "url.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_BASE "https://api.telegram.org"
#define STATE_NAME "telegram.state"
#define SPOOL_NAME "telegram.spool"
#define STATE_MAX (4u << 20)
#define REPLY_MAX (8u << 20)          /* 100 updates of 4096 characters fit many times */
#define CONNECT_TIMEOUT_S 15L
#define SEND_TIMEOUT_S 30L
#define TEXT_MAX_CHARS 4096           /* Bot API limit of one message */
#define BACKOFF_MAX_S 60
#define REPEAT_MARK "(possibly a repeat: the bridge restarted while sending) "

struct bridge {
	const char *workspace;
	int sfma_fd, inbox_fd, spool_fd, outbox_fd;  /* -1 when not (yet) open */
	char *base, *token;
	const char *secret;                          /* in token: the part after ':' */
	bool locked;                                 /* TELEGRAM_CHAT_ID is set */
	long long chat_id;
	long poll_timeout;
	bool once;
	const char *crash_at;                        /* SFMA_TELEGRAM_CRASH_AT */
	CURL *curl;
	/* state, persisted in .sfma/telegram.state when locked */
	long long offset;                            /* next update id wanted; 0: none yet */
	json_t *sent;                                /* set of outbox names done with */
	char *sending;                               /* name whose send is unconfirmed */
	json_t *seen_chats;                          /* discovery: chat ids printed */
	/* the running transfer */
	bool long_poll;                              /* a getUpdates is waiting */
	struct timespec outbox_mtime;
	long long last_outbox_check;
};

/* API_REFUSED: the server answered and did not do it (so nothing was sent);
 * API_FAILED: no usable answer (a send may or may not have happened). */
enum api_rc { API_OK, API_FAILED, API_REFUSED, API_REJECTED, API_INTERRUPTED };

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

static const char usage_text[] =
	"usage: sfma-telegram [--once] [--poll-timeout SECONDS] WORKSPACE\n"
	"       sfma-telegram --version | --help\n";

/* Testing aid: die as kill -9 would at a named step, to prove the order. */
static void crash_point(const struct bridge *b, const char *step)
{
	if (b->crash_at && strcmp(b->crash_at, step) == 0)
		raise(SIGKILL);
}

/* Replace every copy of the token's secret half (the whole token has it)
 * in s, a NUL-terminated string in a buffer of cap bytes. Everything that
 * reaches stderr from libcurl or the server passes through here. */
static void scrub(const struct bridge *b, char *s, size_t cap)
{
	const char *mask = "<token>";
	size_t tl = strlen(b->secret);
	struct buf out = {0};
	const char *p = s, *hit;
	while ((hit = strstr(p, b->secret))) {
		buf_add(&out, p, (size_t)(hit - p));
		buf_adds(&out, mask);
		p = hit + tl;
	}
	buf_adds(&out, p);
	snprintf(s, cap, "%s", out.p);
	buf_free(&out);
}

/* ---- state --------------------------------------------------------------- */

static void state_load(struct bridge *b)
{
	b->sent = json_object();
	json_t *doc;
	struct sfma_err e = {""};
	int got = statefile_read(b->sfma_fd, STATE_NAME, STATE_MAX, &doc, &e);
	if (got == 0)
		return;
	json_t *sent = json_object_get(doc, "sent"), *sending = json_object_get(doc, "sending"), *v;
	size_t i;
	/* A bridge that cannot tell what it delivered must not guess: starting
	 * afresh would replay every outbox message. */
	if (got < 0 || !ndjson_integer(json_object_get(doc, "offset"), &b->offset) || b->offset < 0 ||
	    !json_is_array(sent) || (sending && !json_is_null(sending) && !json_is_string(sending)))
		die(".sfma/%s: unreadable (%s); fix or remove it (removing it resends every outbox message)",
		    STATE_NAME, e.text[0] ? e.text : "not a bridge state");
	json_array_foreach(sent, i, v)
		if (json_is_string(v))
			json_object_set_new(b->sent, json_string_value(v), json_true());
	if (json_is_string(sending))
		b->sending = xstrdup(json_string_value(sending));
	json_decref(doc);
}

static void state_save(struct bridge *b)
{
	json_t *sent = json_array(), *v;
	const char *name;
	json_object_foreach(b->sent, name, v)
		json_array_append_new(sent, json_string(name));
	json_t *doc = json_pack("{s:i, s:I, s:o, s:s?}", "version", 1, "offset", (json_int_t)b->offset,
	                        "sent", sent, "sending", b->sending);
	struct sfma_err e;
	if (statefile_write(b->sfma_fd, STATE_NAME, doc, &e) < 0)
		die(".sfma/%s", e.text);
	json_decref(doc);
}

/* ---- the Bot API --------------------------------------------------------- */

struct sink {
	struct buf body;
	bool too_big;
};

static size_t on_data(char *p, size_t size, size_t nmemb, void *userdata)
{
	struct sink *k = userdata;
	size_t n = size * nmemb;
	if (n > REPLY_MAX - k->body.len) {
		k->too_big = true;
		return 0; /* any other count aborts the transfer */
	}
	buf_add(&k->body, p, n);
	return n;
}

/* Called by libcurl about once a second even while a long poll idles: end
 * the transfer when asked to stop, or when the outbox changed so that a new
 * question need not wait for the poll to time out. Abandoning getUpdates is
 * safe: only a later offset acknowledges anything. */
static int on_progress(void *userdata, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	struct bridge *b = userdata;
	if (!b->long_poll)
		return 0; /* a send takes moments: let it finish and be recorded */
	if (stop_signal)
		return 1;
	if (!b->locked || b->once || b->outbox_fd < 0 || mono_ms() - b->last_outbox_check < 300)
		return 0;
	b->last_outbox_check = mono_ms();
	struct stat st;
	if (fstat(b->outbox_fd, &st) == 0 && (st.st_mtim.tv_sec != b->outbox_mtime.tv_sec ||
	                                      st.st_mtim.tv_nsec != b->outbox_mtime.tv_nsec))
		return 1;
	return 0;
}

#define SET(opt, val) \
	do { \
		if (curl_easy_setopt(b->curl, opt, val) != CURLE_OK) { \
			err_set(e, "cannot set %s", #opt); \
			goto out; \
		} \
	} while (0)

/* Call METHOD with the JSON body req. API_OK sets *result (a new reference
 * to the reply's "result"); API_REJECTED means the token was refused (no
 * retry can help); API_INTERRUPTED means the transfer was ended on purpose.
 * The URL holds the token: it is never printed, and every error text is
 * scrubbed. */
static enum api_rc api_call(struct bridge *b, const char *method, json_t *req, long timeout_s,
                            json_t **result, long *retry_after, struct sfma_err *e)
{
	enum api_rc rc = API_FAILED;
	char errbuf[CURL_ERROR_SIZE] = "";
	struct sink k = {0};
	struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
	char *body = json_dumps(req, JSON_COMPACT);
	struct buf url = {0};
	json_t *reply = NULL;
	*result = NULL;
	if (retry_after)
		*retry_after = 0;
	buf_printf(&url, "%s/bot%s/%s", b->base, b->token, method);
	if (!headers || !body) {
		err_set(e, "out of memory");
		goto out;
	}

	curl_easy_reset(b->curl);
	SET(CURLOPT_URL, url.p);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_FOLLOWLOCATION, 0L);  /* a redirect would carry the token elsewhere */
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_TIMEOUT, timeout_s);
	SET(CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
	SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)REPLY_MAX);
	SET(CURLOPT_USERAGENT, "sfma-telegram");
	SET(CURLOPT_HTTPHEADER, headers);
	SET(CURLOPT_POSTFIELDS, body);
	SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	SET(CURLOPT_WRITEFUNCTION, on_data);
	SET(CURLOPT_WRITEDATA, &k);
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_XFERINFOFUNCTION, on_progress);
	SET(CURLOPT_XFERINFODATA, b);
	SET(CURLOPT_ERRORBUFFER, errbuf);

	CURLcode cc = curl_easy_perform(b->curl);
	curl_easy_setopt(b->curl, CURLOPT_ERRORBUFFER, NULL);
	if (cc == CURLE_ABORTED_BY_CALLBACK) {
		rc = API_INTERRUPTED;
		err_set(e, "%s: interrupted", method);
		goto out;
	}
	if (k.too_big || cc == CURLE_FILESIZE_EXCEEDED) {
		err_set(e, "%s: reply larger than %u bytes", method, REPLY_MAX);
		goto out;
	}
	if (cc != CURLE_OK) {
		scrub(b, errbuf, sizeof errbuf);
		err_set(e, "%s: %s", method, errbuf[0] ? errbuf : curl_easy_strerror(cc));
		goto out;
	}
	long status = 0;
	curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &status);
	reply = ndjson_parse(k.body.p ? k.body.p : "", k.body.len, NULL);
	json_t *ok = json_object_get(reply, "ok");
	if (status == 401 || status == 404) {
		/* The Bot API answers an unknown token with 401 or 404. */
		rc = API_REJECTED;
		err_set(e, "%s: HTTP %ld: the bot token was rejected", method, status);
		goto out;
	}
	if (!json_is_boolean(ok)) {
		err_set(e, "%s: HTTP %ld: not a Bot API reply", method, status);
		goto out;
	}
	if (!json_is_true(ok) || status != 200) {
		char desc[256];
		const char *d = json_string_value(json_object_get(reply, "description"));
		size_t n = 0;
		/* The server's words, made printable and short. */
		for (; d && d[n] && n < sizeof desc - 1; n++)
			desc[n] = d[n] >= 0x20 && d[n] < 0x7f ? d[n] : '?';
		desc[n] = '\0';
		scrub(b, desc, sizeof desc);
		long long after;
		if (retry_after && ndjson_integer(json_object_get(json_object_get(reply, "parameters"),
		                                                   "retry_after"), &after) && after > 0)
			*retry_after = after < BACKOFF_MAX_S ? (long)after : BACKOFF_MAX_S;
		err_set(e, "%s: HTTP %ld: %s", method, status, n ? desc : "refused");
		rc = API_REFUSED;
		goto out;
	}
	*result = json_incref(json_object_get(reply, "result"));
	rc = API_OK;
out:
	explicit_bzero(url.p, url.len);
	buf_free(&url);
	buf_free(&k.body);
	free(body);
	curl_slist_free_all(headers);
	json_decref(reply);
	return rc;
}

/* ---- Telegram -> inbox --------------------------------------------------- */

/* The update id in a spool name <date-ms>-<update-id>-telegram-<user>.txt,
 * or -1 for a name that is not one of ours. */
static long long spool_update_id(const char *name)
{
	char *end;
	errno = 0;
	strtoll(name, &end, 10);
	if (end == name || *end != '-')
		return -1;
	const char *p = end + 1;
	long long id = strtoll(p, &end, 10);
	if (end == p || errno || strncmp(end, "-telegram-", 10) != 0)
		return -1;
	return id;
}

/* Step 4, and recovery at start: committed spool files move into the inbox,
 * uncommitted ones are dropped (Telegram serves them again). */
static void deliver_spool(struct bridge *b)
{
	int fd = dup(b->spool_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d)
		die(".sfma/%s: %s", SPOOL_NAME, strerror(errno));
	rewinddir(d);
	struct dirent *de;
	int moved = 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_name[0] == '.') {
			/* a temporary file left by a kill during step 2 */
			unlinkat(b->spool_fd, de->d_name, 0);
			continue;
		}
		long long id = spool_update_id(de->d_name);
		if (id < 0) {
			warning(".sfma/%s/%s: not a spooled message; left alone", SPOOL_NAME, de->d_name);
			continue;
		}
		if (id >= b->offset) {
			unlinkat(b->spool_fd, de->d_name, 0);
			continue;
		}
		if (renameat(b->spool_fd, de->d_name, b->inbox_fd, de->d_name) < 0)
			die("deliver %s: %s", de->d_name, strerror(errno));
		warning("delivered update %lld as inbox/%s", id, de->d_name);
		moved++;
		crash_point(b, "delivered-one");
	}
	closedir(d);
	/* Make the renames durable before anything else is acknowledged. */
	if (moved && (fsync(b->inbox_fd) < 0 || fsync(b->spool_fd) < 0) && errno != EINVAL)
		die("inbox: fsync: %s", strerror(errno));
}

/* Who sent msg, as a label fit for a file name and a log line. */
static void sender_label(json_t *msg, char *out, size_t cap)
{
	json_t *from = json_object_get(msg, "from");
	const char *who = json_string_value(json_object_get(from, "username"));
	if (!who)
		who = json_string_value(json_object_get(json_object_get(msg, "chat"), "username"));
	if (!who)
		who = json_string_value(json_object_get(from, "first_name"));
	mailbox_label(who, out, cap);
}

/* Step 2 for one update of the allowed chat. */
static void spool_message(struct bridge *b, long long id, json_t *msg, const char *user)
{
	json_t *text = json_object_get(msg, "text");
	if (!json_is_string(text)) {
		warning("update %lld from the operator: not a text message; ignored", id);
		return;
	}
	size_t len = json_string_length(text);
	if (len == 0 || len > INBOX_FILE_MAX || !utf8_text_ok(json_string_value(text), len)) {
		warning("update %lld from the operator: empty, over %u bytes or holding NUL; ignored",
		      id, INBOX_FILE_MAX);
		return;
	}
	long long date = 0;
	if (!ndjson_integer(json_object_get(msg, "date"), &date) || date < 0 || date > 99999999999LL)
		date = 0;
	char name[200];
	snprintf(name, sizeof name, "%013lld-%012lld-telegram-%s.txt", date * 1000, id, user);
	struct sfma_err e;
	if (atomic_write_at(b->spool_fd, name, json_string_value(text), len, 0600, &e) < 0)
		die(".sfma/%s/%s", SPOOL_NAME, e.text);
}

/* One getUpdates round: steps 1 to 4. Returns the api_call outcome. */
static enum api_rc poll_updates(struct bridge *b, struct sfma_err *e)
{
	json_t *req = json_pack("{s:I, s:I, s:[s]}", "timeout", (json_int_t)b->poll_timeout,
	                        "limit", (json_int_t)100, "allowed_updates", "message");
	if (b->offset > 0)
		json_object_set_new(req, "offset", json_integer((json_int_t)b->offset));
	json_t *updates = NULL;
	b->long_poll = true;
	struct stat st;
	if (b->outbox_fd >= 0 && fstat(b->outbox_fd, &st) == 0)
		b->outbox_mtime = st.st_mtim;
	enum api_rc rc = api_call(b, "getUpdates", req, b->poll_timeout + CONNECT_TIMEOUT_S, &updates, NULL, e);
	b->long_poll = false;
	json_decref(req);
	if (rc != API_OK)
		return rc;
	if (!json_is_array(updates)) {
		json_decref(updates);
		err_set(e, "getUpdates: result is not an array");
		return API_FAILED;
	}
	long long next = b->offset;
	size_t i;
	json_t *u;
	json_array_foreach(updates, i, u) {
		long long id;
		if (!ndjson_integer(json_object_get(u, "update_id"), &id) || id < 0 || id >= (1LL << 53)) {
			warning("getUpdates: an update without a valid update_id; ignored");
			continue;
		}
		if (id < b->offset)
			continue; /* acknowledged already: a server replaying it is wrong */
		if (id + 1 > next)
			next = id + 1;
		json_t *msg = json_object_get(u, "message");
		long long chat;
		if (!ndjson_integer(json_object_get(json_object_get(msg, "chat"), "id"), &chat)) {
			warning("update %lld: not a chat message; ignored", id);
			continue;
		}
		char user[64];
		sender_label(msg, user, sizeof user);
		if (!b->locked) {
			char key[32];
			snprintf(key, sizeof key, "%lld", chat);
			if (!json_object_get(b->seen_chats, key)) {
				json_object_set_new(b->seen_chats, key, json_true());
				printf("%lld %s\n", chat, user);
				fflush(stdout);
			}
		} else if (chat != b->chat_id) {
			/* Never the text: a stranger's words do not belong in logs. */
			warning("update %lld from chat %lld (%s): not TELEGRAM_CHAT_ID; ignored", id, chat, user);
		} else {
			spool_message(b, id, msg, user);
		}
	}
	json_decref(updates);
	if (next == b->offset)
		return API_OK;
	b->offset = next;
	if (!b->locked)
		return API_OK; /* discovery keeps its offset in memory only */
	crash_point(b, "spooled");
	state_save(b);
	crash_point(b, "committed");
	deliver_spool(b);
	return API_OK;
}

/* ---- outbox -> Telegram -------------------------------------------------- */

/* "[kind] text", clipped to the Bot API's length in characters. */
static json_t *message_text(json_t *msg, bool repeat)
{
	struct buf t = {0};
	if (repeat)
		buf_adds(&t, REPEAT_MARK);
	char kind[32];
	mailbox_label(json_string_value(json_object_get(msg, "kind")), kind, sizeof kind);
	buf_printf(&t, "[%s] ", kind);
	json_t *text = json_object_get(msg, "text");
	const char *s = json_string_value(text);
	size_t n = json_string_length(text), chars = 0, i = 0;
	const size_t room = TEXT_MAX_CHARS - 40 - strlen(t.p);
	/* Count code points; Telegram counts UTF-16 units, so astral
	 * characters count twice to stay under the limit. */
	while (i < n && chars < room) {
		unsigned char c = (unsigned char)s[i];
		size_t w = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
		chars += w == 4 ? 2 : 1;
		i += w;
	}
	buf_add(&t, s, i < n ? i : n);
	if (i < n)
		buf_printf(&t, " [clipped: %zu more bytes]", n - i);
	json_t *out = json_stringn(t.p, t.len);
	buf_free(&t);
	return out;
}

/* Send every outbox message not sent yet, oldest first; stop at the first
 * failure so that the chat keeps the engine's order. */
static enum api_rc send_outbox(struct bridge *b, long *retry_after, struct sfma_err *e)
{
	struct sfma_err oe;
	if (b->outbox_fd < 0 && (b->outbox_fd = mailbox_dir(b->workspace, "outbox", 0, &oe)) < 0)
		return API_OK; /* the engine has not written to the operator yet */
	char **names;
	size_t n;
	if (outbox_list(b->outbox_fd, &names, &n, &oe) < 0)
		die(".sfma/%s", oe.text);
	enum api_rc rc = API_OK;
	bool changed = false;
	for (size_t i = 0; i < n && rc == API_OK && !stop_signal; i++) {
		if (json_object_get(b->sent, names[i]))
			continue;
		json_t *msg = outbox_read(b->outbox_fd, names[i], &oe);
		if (!msg) {
			warning("outbox/%s; not sent", oe.text);
			json_object_set_new(b->sent, names[i], json_true());
			changed = true;
			continue;
		}
		bool repeat = b->sending && strcmp(b->sending, names[i]) == 0;
		free(b->sending);
		b->sending = xstrdup(names[i]);
		state_save(b); /* intent first: a restart knows this one may be out */
		crash_point(b, "sending");
		json_t *req = json_pack("{s:I, s:o}", "chat_id", (json_int_t)b->chat_id,
		                        "text", message_text(msg, repeat));
		json_decref(msg);
		json_t *result = NULL;
		rc = api_call(b, "sendMessage", req, SEND_TIMEOUT_S, &result, retry_after, e);
		json_decref(req);
		json_decref(result);
		if (rc == API_OK) {
			crash_point(b, "sent");
			json_object_set_new(b->sent, names[i], json_true());
			free(b->sending);
			b->sending = NULL;
			state_save(b);
			warning("sent outbox/%s", names[i]);
		} else if (rc == API_REFUSED) {
			/* The server said no: nothing went out, no repeat mark next time. */
			free(b->sending);
			b->sending = NULL;
			state_save(b);
		}
	}
	/* Forget names the outbox no longer holds: the state stays its size. */
	const char *name;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(b->sent, tmp, name, v) {
		bool present = false;
		for (size_t i = 0; i < n && !present; i++)
			present = strcmp(names[i], name) == 0;
		if (!present) {
			json_object_del(b->sent, name);
			changed = true;
		}
	}
	if (changed)
		state_save(b);
	mailbox_names_free(names, n);
	return rc;
}

/* ---- set-up -------------------------------------------------------------- */

/* The API base: where the token may travel (it is in the path) is
 * url_transport_ok's rule, the same as for every other secret. Besides, no
 * user info, query or fragment: the method is appended to the path. */
static char *check_base(const char *base)
{
	struct sfma_err e;
	if (url_transport_ok(base, &e) < 0)
		die_status(2, "TELEGRAM_API_BASE: %s", e.text);
	CURLU *u = curl_url();
	char *host = NULL, *user = NULL, *query = NULL, *frag = NULL;
	if (!u || curl_url_set(u, CURLUPART_URL, base, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
		die_status(2, "TELEGRAM_API_BASE: not a URL");
	curl_url_get(u, CURLUPART_USER, &user, 0);
	curl_url_get(u, CURLUPART_QUERY, &query, 0);
	curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
	if (user || query || frag)
		die_status(2, "TELEGRAM_API_BASE: no user, query or fragment allowed");
	curl_free(host), curl_free(user), curl_free(query), curl_free(frag);
	curl_url_cleanup(u);
	char *out = xstrdup(base);
	for (size_t n = strlen(out); n > 0 && out[n - 1] == '/'; n--)
		out[n - 1] = '\0';
	return out;
}

static void read_config(struct bridge *b)
{
	const char *token = getenv("TELEGRAM_BOT_TOKEN");
	if (!token || !*token)
		die_status(2, "TELEGRAM_BOT_TOKEN is not set");
	/* Bot tokens are <digits>:<base64url>; anything else could reshape the URL. */
	if (strlen(token) > 256 || strspn(token, "0123456789:ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                                         "abcdefghijklmnopqrstuvwxyz_-") != strlen(token))
		die_status(2, "TELEGRAM_BOT_TOKEN: not a bot token");
	b->token = xstrdup(token);
	const char *colon = strchr(b->token, ':');
	b->secret = colon && colon[1] ? colon + 1 : b->token;
	/* Nothing started later needs it; keep it out of /proc/self/environ. */
	explicit_bzero((char *)token, strlen(token));
	unsetenv("TELEGRAM_BOT_TOKEN");

	const char *base = getenv("TELEGRAM_API_BASE");
	b->base = check_base(base && *base ? base : DEFAULT_BASE);

	const char *chat = getenv("TELEGRAM_CHAT_ID");
	if (chat && *chat) {
		char *end;
		errno = 0;
		b->chat_id = strtoll(chat, &end, 10);
		if (errno || *end || end == chat)
			die_status(2, "TELEGRAM_CHAT_ID: not an integer chat id");
		b->locked = true;
	}
	const char *crash = getenv("SFMA_TELEGRAM_CRASH_AT");
	b->crash_at = crash && *crash ? crash : NULL;
}

#define POLL_TIMEOUT_MAX_S 3600

static void parse_args(struct bridge *b, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"once", no_argument, NULL, 'o'},
		{"poll-timeout", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	b->poll_timeout = 25;
	opterr = 0;
	int c;
	unsigned long secs;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': b->once = true; break;
		case 'p':
			if (cli_parse_ulong(optarg, 0, POLL_TIMEOUT_MAX_S, &secs) < 0)
				cli_usage_error(usage_text, "--poll-timeout: a whole number of seconds, 0 to %d",
				                POLL_TIMEOUT_MAX_S);
			b->poll_timeout = (long)secs;
			break;
		case 'h': cli_help(usage_text);
		case 'V': cli_version();
		default: cli_bad_option(usage_text, c, argv);
		}
	}
	if (optind == argc)
		cli_usage_error(usage_text, "a WORKSPACE is required");
	if (optind != argc - 1)
		cli_usage_error(usage_text, "one WORKSPACE only (unexpected %s)", argv[optind + 1]);
	b->workspace = argv[optind];
}

static void open_mailbox(struct bridge *b)
{
	struct sfma_err e;
	if (!b->locked) {
		/* Discovery writes nothing; the workspace is only checked. */
		int ws = open(b->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ws < 0)
			die("%s: %s", b->workspace, strerror(errno));
		close(ws);
		return;
	}
	if ((b->sfma_fd = mailbox_dir(b->workspace, NULL, 1, &e)) < 0 ||
	    (b->inbox_fd = mailbox_dir(b->workspace, "inbox", 1, &e)) < 0 ||
	    (b->spool_fd = mailbox_dir(b->workspace, SPOOL_NAME, 1, &e)) < 0)
		die("%s", e.text);
	b->outbox_fd = mailbox_dir(b->workspace, "outbox", 0, &e);
}

static void catch_signals(void)
{
	struct sigaction sa = {.sa_handler = on_stop};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Sleep up to s seconds, waking early on a stop signal. */
static void pause_for(long s)
{
	struct timespec left = {.tv_sec = s};
	while (!stop_signal && nanosleep(&left, &left) < 0 && errno == EINTR)
		;
}

/* One cycle: recover, send, poll. Returns false when it failed. */
static bool cycle(struct bridge *b, long *retry_after, bool *fatal)
{
	struct sfma_err e;
	enum api_rc rc = API_OK;
	*retry_after = 0;
	if (b->locked) {
		deliver_spool(b);
		rc = send_outbox(b, retry_after, &e);
	}
	if (rc == API_OK && !stop_signal)
		rc = poll_updates(b, &e);
	if (rc == API_INTERRUPTED)
		return true; /* a signal or a fresh outbox message: go round again */
	if (rc != API_OK) {
		warning("%s", e.text);
		*fatal = rc == API_REJECTED;
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	struct bridge b = {.sfma_fd = -1, .inbox_fd = -1, .spool_fd = -1, .outbox_fd = -1};
	parse_args(&b, argc, argv);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		die("cannot initialise libcurl");
	read_config(&b);
	open_mailbox(&b);
	if (b.locked)
		state_load(&b);
	else
		warning("TELEGRAM_CHAT_ID is not set: discovery mode, printing the chat ids seen, writing nothing");
	b.seen_chats = json_object();
	if (!(b.curl = curl_easy_init()))
		die("cannot initialise libcurl");
	/* The mailbox, its state and the Bot API's port only, from here on
	 * (sfma(1), CONFINEMENT). */
	uint16_t ports[16];
	size_t n_ports = 0;
	if (url_port(b.base) > 0)
		ports[n_ports++] = (uint16_t)url_port(b.base);
	url_proxy_ports(ports, &n_ports, sizeof ports / sizeof *ports);
	const struct confine_places places = {.workspace = b.workspace, .ports = ports, .n_ports = n_ports};
	confine_self("sfma-telegram", NULL, &places);
	catch_signals();

	int status = 0, failures = 0;
	while (!stop_signal) {
		long retry_after;
		bool fatal = false;
		bool ok = cycle(&b, &retry_after, &fatal);
		failures = ok ? 0 : failures + 1;
		if (fatal || (!ok && b.once)) {
			status = 1;
			break;
		}
		if (b.once)
			break;
		if (ok && b.poll_timeout == 0)
			pause_for(1); /* no long poll: do not hammer the server */
		if (!ok) {
			/* Back off 1, 2, 4 ... 60 s, or as long as the server asked. */
			long wait = failures > 6 ? BACKOFF_MAX_S : 1L << (failures - 1);
			pause_for(retry_after > wait ? retry_after : wait);
		}
	}
	curl_easy_cleanup(b.curl);
	curl_global_cleanup();
	explicit_bzero(b.token, strlen(b.token));
	free(b.token), free(b.base), free(b.sending);
	json_decref(b.sent), json_decref(b.seen_chats);
	return status;
}
