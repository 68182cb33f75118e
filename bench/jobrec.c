/*
 * jobrec: make's SHELL while a build is recorded (bench/buildgraph.py).
 *
 *   make SHELL=/path/jobrec ...        each recipe line: jobrec -c 'LINE'
 *   jobrec --part NAME CMD ARGS...      one command inside a recipe line
 *
 * A recipe line runs /bin/sh with the same arguments, in a child, and one
 * line is appended to $JOBREC_LOG when it ends (one write, O_APPEND, so
 * that concurrent jobs' lines do not mix):
 *
 *   J ID PARENT START END USER SYS STATUS CWD COMMAND
 *
 * tab-separated; times in ns of CLOCK_MONOTONIC, CPU in us of the child
 * and every descendant it waited for (wait4); CWD and COMMAND with \\, \t
 * and \n escaped.  PARENT is the recipe line whose make ran this one
 * (JOBREC_PARENT, which jobrec sets for its child), empty at the top.
 *
 * make also runs SHELL for $(shell ...) while it reads its makefiles.
 * Those are not jobs: make hands them its own environment, while a recipe
 * gets MAKELEVEL one higher than its make's; jobrec passes the MAKELEVEL
 * its recipe saw on as JOBREC_LEVEL, and execs /bin/sh at once when
 * MAKELEVEL is not above it.
 *
 * --part logs "P NAME ID ..." the same way, ID being the enclosing recipe
 * line's, for a command (objbtf's encode) whose share of the line the
 * replay needs on its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Append s to buf (at *len, capacity *cap) with \, tab and newline escaped;
 * leaves room for two more bytes. */
static void put_escaped(char **buf, size_t *len, size_t *cap, const char *s)
{
	do {
		if (*len + 3 >= *cap) {
			*cap = *cap * 2 + 64;
			*buf = realloc(*buf, *cap);
			if (!*buf)
				exit(127);
		}
		switch (*s) {
		case '\\': (*buf)[(*len)++] = '\\'; (*buf)[(*len)++] = '\\'; break;
		case '\t': (*buf)[(*len)++] = '\\'; (*buf)[(*len)++] = 't'; break;
		case '\n': (*buf)[(*len)++] = '\\'; (*buf)[(*len)++] = 'n'; break;
		case '\0': return;
		default: (*buf)[(*len)++] = *s;
		}
	} while (*s++);
}

static void log_line(const char *kind, const char *id, const char *parent, long long start,
		     long long end, const struct rusage *ru, int status, char **words, int nwords)
{
	const char *path = getenv("JOBREC_LOG");
	char head[512], cwd[4096];
	size_t len, cap = 8192;
	char *buf;
	int fd, i;

	if (!path)
		return;
	if (!getcwd(cwd, sizeof(cwd)))
		strcpy(cwd, "?");
	len = snprintf(head, sizeof(head), "%s\t%s\t%s\t%lld\t%lld\t%ld\t%ld\t%d\t", kind, id, parent,
		       start, end, ru->ru_utime.tv_sec * 1000000L + ru->ru_utime.tv_usec,
		       ru->ru_stime.tv_sec * 1000000L + ru->ru_stime.tv_usec, status);
	buf = malloc(cap);
	if (!buf)
		return;
	memcpy(buf, head, len);
	put_escaped(&buf, &len, &cap, cwd);
	for (i = 0; i < nwords; i++) {
		put_escaped(&buf, &len, &cap, "");    /* room for the separator */
		buf[len++] = i ? ' ' : '\t';
		put_escaped(&buf, &len, &cap, words[i]);
	}
	put_escaped(&buf, &len, &cap, "");
	buf[len++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, buf, len) != (ssize_t)len)
			perror("jobrec: JOBREC_LOG");
		close(fd);
	}
	free(buf);
}

static pid_t child;

/* A signal for jobrec is for the command it runs (make kills its jobs on
 * SIGTERM): passed on, and jobrec ends as the command did. */
static void forward(int sig)
{
	kill(child, sig);
}

/* Run argv (execvp), wait for it; its exit status as a shell gives it. */
static int run(char **argv, const char *kind, const char *part, char **words, int nwords)
{
	char id[64], level[32];
	const char *parent = getenv("JOBREC_PARENT");
	const char *makelevel = getenv("MAKELEVEL");
	struct rusage ru;
	long long start = now_ns(), end;
	int status;
	pid_t pid;

	snprintf(id, sizeof(id), "%d.%lld", (int)getpid(), start);
	pid = fork();
	if (pid < 0) {
		perror("jobrec: fork");
		return 127;
	}
	if (pid == 0) {
		if (!part) {
			snprintf(level, sizeof(level), "%s", makelevel ? makelevel : "0");
			setenv("JOBREC_PARENT", id, 1);
			setenv("JOBREC_LEVEL", level, 1);
		}
		execvp(argv[0], argv);
		perror(argv[0]);
		_exit(127);
	}
	child = pid;
	signal(SIGHUP, forward);
	signal(SIGINT, forward);
	signal(SIGQUIT, forward);
	signal(SIGTERM, forward);
	while (wait4(pid, &status, 0, &ru) < 0) {
		if (errno != EINTR) {
			perror("jobrec: wait4");
			return 127;
		}
	}
	end = now_ns();
	log_line(kind, part ? part : id, parent ? parent : "", start, end, &ru, status, words, nwords);
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		kill(getpid(), WTERMSIG(status));
		return 128 + WTERMSIG(status);
	}
	return WEXITSTATUS(status);
}

int main(int argc, char **argv)
{
	const char *level = getenv("JOBREC_LEVEL");
	const char *makelevel = getenv("MAKELEVEL");

	if (argc > 3 && strcmp(argv[1], "--part") == 0)
		return run(argv + 3, "P", argv[2], argv + 3, argc - 3);
	argv[0] = "/bin/sh";
	if (level && atoi(makelevel ? makelevel : "0") <= atoi(level)) {
		execv("/bin/sh", argv);        /* make's $(shell ...): not a job */
		perror("/bin/sh");
		return 127;
	}
	return run(argv, "J", NULL, argv + argc - 1, 1);
}
