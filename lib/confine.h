/* confine.h - each program confines itself once set up: no_new_privs, a
 * Landlock ruleset granting only the paths (and TCP ports) it needs, and a
 * seccomp filter refusing exec and internet sockets where it needs none.
 *
 * The policies are data: one table (lib/confine.c), one row per program,
 * shown in sfma(1), CONFINEMENT. confine_apply() enforces a row and says
 * what is in force; the library never prints and never exits: a program
 * that cannot be confined goes on, and its report says so (best effort,
 * as landlock(7) recommends; requireConfinement turns it into a refusal,
 * see confine_lacks()). */
#ifndef SFMA_CONFINE_H
#define SFMA_CONFINE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Who may open which kind of socket (seccomp, socket(2)'s domain). */
enum confine_sockets {
	CONFINE_SOCKETS_UNIX,    /* AF_UNIX only */
	CONFINE_SOCKETS_NO_INET, /* anything but AF_INET, AF_INET6, AF_PACKET */
	CONFINE_SOCKETS_ANY,
};

#define CONFINE_MAX_GRANTS 16

/* A path and the Landlock access rights granted beneath it. A path is
 * absolute, or begins with a place the program names at run time:
 * "@ws" (the workspace, e.g. "@ws/.sfma/evidence"), "@arg" (each of the
 * paths it reads), "@argdir" (the directory of each), "@out" (the
 * directory of each file it replaces), "@scratch" (a directory it made
 * for itself; "@scratch/..", the one that holds it), "@env:NAME" (the path in the
 * variable NAME, when set), "@beside:NAME" (the program NAME in this
 * program's directory), "@interp" (the ELF interpreter this program
 * names, which execve(2) opens for execution too), or "@runtime", "@tls",
 * "@git" (the fixed sets named in lib/confine.c; @git also the git PATH
 * finds, and its interpreter when it is a script). A path that does not
 * exist when the program confines itself grants nothing. */
struct confine_grant {
	const char *path;
	uint64_t access;
};

struct confine_policy {
	const char *program;
	struct confine_grant grants[CONFINE_MAX_GRANTS];
	int no_landlock;         /* no Landlock layer at all (see sfma/relay) */
	int filesystem;          /* Landlock handles file access (see sfma-exec) */
	int needs_refer;         /* renames across directories (none on ABI 1) */
	int may_exec;            /* execve/execveat allowed (seccomp) */
	int may_connect;         /* TCP connect, to the ports the program names */
	enum confine_sockets sockets;
	int scope_signal;        /* ABI 6: no signal to a process outside its domain */
};

/* The row of program (e.g. "sfma-chain"), or NULL. */
const struct confine_policy *confine_policy(const char *program);
/* The table, NULL-terminated by program (for sfma(1) and the tests). */
extern const struct confine_policy confine_table[];

/* What the placeholders stand for in this process. */
struct confine_places {
	const char *workspace;          /* @ws, or NULL */
	const char *const *args;        /* @arg, @argdir: NULL-terminated, or NULL */
	const char *const *outs;        /* @out: NULL-terminated, or NULL */
	const char *scratch;            /* @scratch, a directory of its own ("@scratch/..": where it is) */
	const uint16_t *ports;          /* TCP ports it may connect to */
	size_t n_ports;
};

/* What is in force (sfma-formats(5), the `confinement` entry). */
struct confine_report {
	char stage[48];
	int abi;                 /* Landlock ABI in force; 0: unavailable */
	char why[160];           /* why not, or what is left out; "" when whole */
	int seccomp;             /* the filter is installed */
	int no_new_privs;
};

/* Enforce p on the calling thread (and so on everything it starts: Landlock
 * domains and seccomp filters survive fork and execve). Always fills r;
 * returns 0 when all three are in force, else -1 (r says what is not). No
 * step that fails undoes another: each only ever takes rights away. */
int confine_apply(const struct confine_policy *p, const struct confine_places *pl, struct confine_report *r);

/* The Landlock ABI this kernel offers (0: none; *why says why). */
int confine_landlock_abi(const char **why);

/* The report as the entry's data: {"stage","landlock","seccomp",
 * "noNewPrivs"} and "why" when not empty; caller owns. */
json_t *confine_report_json(const struct confine_report *r);

/* A stage that did not report: {"stage","reported":false}. */
json_t *confine_unreported_json(const char *stage);

/* 1 if an entry's data says that confinement is not whole: not reported,
 * Landlock unavailable, seccomp or no_new_privs not in force. *what: a
 * short reason (static or inside data). 0 otherwise. Pure: the decision
 * core's rule for requireConfinement. */
int confine_lacks(const json_t *data, const char **what);

/* The entry's data for one message (n bytes; msg NULL: none came) read
 * from stage's channel: the report's own members when it is one -
 * "stage" the stage's name or "<stage>/<process>", "landlock" 1..255 or
 * "unavailable", "seccomp" and "noNewPrivs" booleans, "why" a string -
 * else {"stage","reported":false,"why"}. Never anything else the message
 * holds. Caller owns. */
json_t *confine_report_read(const char *msg, size_t n, const char *stage);

/* ---- the report channel (PIPELINE.md, Confinement) ----
 * The orchestrator hands each stage one end of a SOCK_SEQPACKET socket pair
 * in SFMA_CONFINE_FD; the planner holds the other. The stage waits for the
 * planner's go (one message: the workspace exists now), confines itself,
 * sends its report (one message) and closes its end. */
#define CONFINE_FD_ENV "SFMA_CONFINE_FD"

/* The channel named by SFMA_CONFINE_FD, removed from the environment: a
 * socket on a descriptor above 2 (never a data pipe), or -1 when none or
 * not such a socket. */
int confine_channel_take(void);
/* Wait for the go; 0, or -1 when the planner closed its end first. */
int confine_channel_await(int fd);
/* Send r as one message; 0 or -1 with errno. */
int confine_channel_send(int fd, const struct confine_report *r);

/* A stage's confinement: with a channel (*channel >= 0), wait for the go,
 * confine, send the report and close the channel (*channel = -1); without
 * one, confine at once. The row is program's. Returns what confine_apply
 * returns (-1 also for a program without a row, r then empty but for its
 * stage). */
int confine_stage(int *channel, const char *program, const struct confine_places *pl,
                  struct confine_report *r);

/* A program that is no stage (no channel): confine it at once to the
 * row of program, with the paths it reads (NULL-terminated; a NULL
 * element ends the list early, "-" is standard input and grants
 * nothing, at most 15 are taken) as @arg and pl's other places. Returns
 * what confine_apply returns. */
int confine_self(const char *program, const char *const *reads, const struct confine_places *pl);

#endif
