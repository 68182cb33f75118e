/*
 * objbtf-client: the resident server's quickest client (client.py in C).
 *
 * Kbuild runs objbtf once per object; a Python client costs about 6 ms of
 * interpreter start before it can even connect, this one well under 1 ms.
 * It does only the common case: find the server of this tree, user and objbtf
 * version (the same socket path client.py computes), send the command (the same
 * request), wait for the exit status.  Everything else (no server yet, a
 * command it does not serve, a reply asking the client to run the command
 * itself, anything that fails before the server took the command) it hands to
 * the Python client by exec'ing "PYTHON -S ROOT/objbtf/cli/entry_no_site.py ARGS", which
 * starts servers and runs commands in process.  So it can be wrong only by
 * being slower: a digest it computes differently finds no server.
 *
 * Built by native_client.py, which defines OBJBTF_PYTHON (the interpreter),
 * OBJBTF_PYTHON_VERSION (its sys.version), the protocol's constants and
 * messages (protocol.py: OBJBTF_PROTOCOL, OBJBTF_MAX_MESSAGE, OBJBTF_REPLY_OK,
 * OBJBTF_VERBOSE, ...) and
 * OBJBTF_SERVED, the commands the server runs (objbtf/cli/dispatch_table.py).
 * ROOT is three directories above this program.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../blake2b.h"

#if !defined(OBJBTF_PYTHON) || !defined(OBJBTF_PYTHON_VERSION) || !defined(OBJBTF_PROTOCOL) \
    || !defined(OBJBTF_SERVED)
#error "build with objbtf/resident/native_client.py"
#endif

extern char **environ;

#define MAX_MESSAGE OBJBTF_MAX_MESSAGE
#define MAX_SOCKET_PATH OBJBTF_MAX_SOCKET_PATH
#define SOCKET_NAME OBJBTF_SOCKET_NAME
/* A reply's length, without the string's NUL. */
#define LEN(reply) (sizeof(reply) - 1)
static const char *const SERVED[] = {OBJBTF_SERVED};

static char root[PATH_MAX];     /* the directory holding objbtf/ */
static char **args;             /* argv without the program name */
static int nargs;

/* ---- the Python client: every case this one does not serve ---------- */

static void python(int in_process)
{
	char script[PATH_MAX + 32];
	char **argv = calloc(nargs + 4, sizeof(*argv));

	if (!argv)
		exit(1);
	if (in_process)
		setenv("OBJBTF_RESIDENT", "0", 1);
	snprintf(script, sizeof(script), "%s/objbtf/cli/entry_no_site.py", root);
	argv[0] = (char *)OBJBTF_PYTHON;
	argv[1] = "-S";
	argv[2] = script;
	memcpy(argv + 3, args, nargs * sizeof(*argv));
	execv(OBJBTF_PYTHON, argv);
	fprintf(stderr, "objbtf: cannot run %s: %s\n", OBJBTF_PYTHON, strerror(errno));
	exit(127);
}

/* ---- BLAKE2b: blake2b.h, 8-byte digests as client.py's ---------------- */

/* The digest as 16 hex digits, as hexdigest() writes it. */
static void b2_hex(struct blake2b *s, char out[17])
{
	uint64_t digest = b2_final(s);
	for (int i = 0; i < 8; i++)
		sprintf(out + 2 * i, "%02x", (unsigned)(digest >> (8 * i)) & 0xff);
}

/* ---- where the server listens: client.runtime_dir and socket_path ---- */

static int private_dir(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid()
	       && !(st.st_mode & 077);
}

static int runtime_dir(char *out, size_t size)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (xdg && xdg[0] == '/' && strlen(xdg) + SOCKET_NAME <= MAX_SOCKET_PATH && private_dir(xdg))
		snprintf(out, size, "%s/objbtf", xdg);
	else
		snprintf(out, size, "/tmp/objbtf-%u", (unsigned)geteuid());
	if (mkdir(out, 0700) && errno != EEXIST)
		return -1;
	return private_dir(out) ? 0 : -1;
}

static int by_number(const void *a, const void *b)
{
	gid_t x = *(const gid_t *)a, y = *(const gid_t *)b;

	return (x > y) - (x < y);
}

/* client.tree_digest: the working directory, the gid and the groups. */
static int tree_digest(char out[17])
{
	char cwd[PATH_MAX], num[24];
	gid_t groups[NGROUPS_MAX + 1];
	struct blake2b s;
	int n = getgroups(NGROUPS_MAX + 1, groups);

	if (!getcwd(cwd, sizeof(cwd)) || n < 0)
		return -1;
	qsort(groups, n, sizeof(*groups), by_number);
	b2_init(&s);
	b2_update(&s, cwd, strlen(cwd));
	snprintf(num, sizeof(num), "%c%u%c", 0, (unsigned)getegid(), 0);
	b2_update(&s, num, strlen(num + 1) + 2);
	for (int i = 0; i < n; i++) {
		snprintf(num, sizeof(num), i ? ",%u" : "%u", (unsigned)groups[i]);
		b2_update(&s, num, strlen(num));
	}
	b2_hex(&s, out);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * client.code_digest: the interpreter, the protocol and every file of the
 * packages by path, size, inode, mtime and ctime, in the order client.py
 * walks them (a stack of directories; each one's entries sorted by name).
 */
static int code_digest(char out[17])
{
	static const char *const packages[] = {"objbtf", "linkdedup"};
	char *stack[256];
	int depth = 0;
	struct blake2b s;
	char line[PATH_MAX + 128];
	const char *pure = getenv("OBJBTF_PURE");
	int n = snprintf(line, sizeof(line), "%d%c%s%c%s%c%s%c%d\n", OBJBTF_PROTOCOL, 0,
			 OBJBTF_PYTHON, 0, OBJBTF_PYTHON_VERSION, 0, root, 0,
			 pure && strcmp(pure, "0") != 0);

	if (n < 0 || n >= (int)sizeof(line))
		return -1;
	b2_init(&s);
	b2_update(&s, line, n);
	for (int i = 0; i < 2; i++)
		if (asprintf(&stack[depth++], "%s/%s", root, packages[i]) < 0)
			return -1;
	while (depth) {
		char *dir = stack[--depth];
		struct dirent **names;
		int count = scandir(dir, &names, NULL, NULL);

		if (count < 0) {
			b2_update(&s, "missing ", 8);
			b2_update(&s, dir, strlen(dir));
			free(dir);
			continue;
		}
		const char **sorted = malloc((count + 1) * sizeof(*sorted));
		int kept = 0;

		if (!sorted)
			return -1;
		for (int i = 0; i < count; i++) {
			const char *name = names[i]->d_name;
			if (strcmp(name, ".") && strcmp(name, "..") && strcmp(name, "__pycache__"))
				sorted[kept++] = name;
		}
		qsort(sorted, kept, sizeof(*sorted), by_name);
		for (int i = 0; i < kept; i++) {
			struct stat st;
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/%s", dir, sorted[i]);
			if (lstat(path, &st))
				return -1;
			if (S_ISDIR(st.st_mode)) {
				if (depth == 256 || !(stack[depth++] = strdup(path)))
					return -1;
				continue;
			}
			if (S_ISLNK(st.st_mode) && stat(path, &st))
				return -1;
			n = snprintf(line, sizeof(line), "%s%c%lld%c%llu%c%lld%c%lld\n", path, 0,
				     (long long)st.st_size, 0, (unsigned long long)st.st_ino, 0,
				     st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, 0,
				     st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec);
			if (n < 0 || n >= (int)sizeof(line))
				return -1;
			b2_update(&s, line, n);
		}
		free(sorted);
		for (int i = 0; i < count; i++)
			free(names[i]);
		free(names);
		free(dir);
	}
	b2_hex(&s, out);
	return 0;
}

/* ---- the request: a marshal of what client._request sends ----------- */

struct message {
	char *data;
	size_t len;
};

static int put(struct message *m, const void *data, size_t len)
{
	if (m->len + len > MAX_MESSAGE)
		return -1;
	memcpy(m->data + m->len, data, len);
	m->len += len;
	return 0;
}

static int put_int(struct message *m, char type, int32_t value)
{
	uint8_t b[5] = {type, value, value >> 8, value >> 16, (uint32_t)value >> 24};

	return put(m, b, 5);
}

static int put_bytes(struct message *m, char type, const char *data, size_t len)
{
	return len > INT32_MAX || put_int(m, type, len) || put(m, data, len);
}

static int request(struct message *m)
{
	cpu_set_t cpus;
	mode_t mask = umask(022);
	int count = 0, nice;

	umask(mask);
	errno = 0;
	nice = getpriority(PRIO_PROCESS, 0);
	if (errno || sched_getaffinity(0, sizeof(cpus), &cpus))
		return -1;
	if (put(m, OBJBTF_REQUEST_RUN, LEN(OBJBTF_REQUEST_RUN)) || put_int(m, '(', 7) || put_int(m, 'i', OBJBTF_PROTOCOL)
	    || put_bytes(m, 'u', "run", 3) || put_int(m, '[', nargs + 1)
	    || put_bytes(m, 's', "objbtf", 6))
		return -1;
	for (int i = 0; i < nargs; i++)
		if (put_bytes(m, 's', args[i], strlen(args[i])))
			return -1;
	if (put(m, "{", 1))
		return -1;
	for (char **e = environ; *e; e++) {
		const char *eq = strchr(*e, '=');
		if (eq && (put_bytes(m, 's', *e, eq - *e) || put_bytes(m, 's', eq + 1, strlen(eq + 1))))
			return -1;
	}
	if (put(m, "0", 1) || put_int(m, 'i', mask))
		return -1;
	for (int i = 0; i < CPU_SETSIZE; i++)
		count += CPU_ISSET(i, &cpus) != 0;
	if (put_int(m, '[', count))
		return -1;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &cpus) && put_int(m, 'i', i))
			return -1;
	return put_int(m, 'i', nice);
}

/* With OBJBTF_VERBOSE, say why the command runs in process (client._say). */
static void say(const char *why, const char *what, int what_len)
{
	const char *verbose = getenv(OBJBTF_VERBOSE);

	if (!verbose || !strcmp(verbose, "0"))
		return;
	fprintf(stderr, "objbtf: %s: run in this process, not by the resident server: %s", args[0], why);
	if (what)
		fprintf(stderr, " (%.*s)", what_len, what);
	fputc('\n', stderr);
}

/* Send the request with stdin, stdout, stderr and the working directory;
 * -1 with errno set if it was not sent. */
static int send_request(int sock, struct message *m)
{
	int fds[4] = {0, 1, 2, open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)};
	union {
		char buf[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} control = {0};
	struct iovec iov = {m->data, m->len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf)};
	struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
	ssize_t sent;

	if (fds[3] < 0)
		return -1;
	cmsg->cmsg_level = SOL_SOCKET;
	cmsg->cmsg_type = SCM_RIGHTS;
	cmsg->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cmsg), fds, sizeof(fds));
	sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
	int error = errno;
	close(fds[3]);
	errno = error;
	return sent == (ssize_t)m->len ? 0 : -1;
}

/* One reply; 0 at the end of the connection (or an error). */
static ssize_t reply(int sock, char *buf, size_t size)
{
	ssize_t n;

	do
		n = recv(sock, buf, size, 0);
	while (n < 0 && errno == EINTR);
	return n < 0 ? 0 : n;
}

int main(int argc, char **argv)
{
	char runtime[PATH_MAX], tree[17], code[17], path[PATH_MAX + 64], buf[64];
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct message m;
	const char *resident = getenv("OBJBTF_RESIDENT");
	ssize_t n, exe = readlink("/proc/self/exe", root, sizeof(root) - 1);
	int sock, served = 0;

	args = argv + 1;
	nargs = argc - 1;
	/* Without /proc (a chroot, a minimal container): the path it was run by. */
	if (exe <= 0 && strchr(argv[0], '/') && realpath(argv[0], root))
		exe = strlen(root);
	/* ROOT/objbtf/resident/objbtf-client */
	for (int cut = 0; exe > 0 && cut < 3; cut++)
		while (exe > 0 && root[--exe] != '/')
			;
	if (exe <= 0) {
		fprintf(stderr, "objbtf: cannot tell where objbtf-client is installed: no "
			"/proc/self/exe, and it was not run by its path\n");
		return 127;
	}
	root[exe] = 0;
	for (size_t i = 0; nargs && i < sizeof(SERVED) / sizeof(*SERVED); i++)
		served |= !strcmp(args[0], SERVED[i]);
	if (!served || (resident && !strcmp(resident, "0")))
		python(0);
	if (runtime_dir(runtime, sizeof(runtime)) || tree_digest(tree) || code_digest(code))
		python(0);
	if (snprintf(path, sizeof(path), "%s/%s-%s.sock", runtime, tree, code) > MAX_SOCKET_PATH)
		python(0);
	strcpy(addr.sun_path, path);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof(addr)))
		python(0);              /* no server: the Python client starts one */
	m.data = malloc(MAX_MESSAGE);
	m.len = 0;
	if (!m.data || request(&m))
		python(0);
	if (send_request(sock, &m)) {
		if (errno != EMSGSIZE)
			python(0);
		/* client.py's REQUEST_TOO_BIG + marshal.dumps((PROTOCOL,)) */
		m.len = 0;
		if (!put(&m, OBJBTF_REQUEST_TOO_BIG, LEN(OBJBTF_REQUEST_TOO_BIG)) && !put_int(&m, '(', 1)
		    && !put_int(&m, 'i', OBJBTF_PROTOCOL))
			send(sock, m.data, m.len, MSG_NOSIGNAL);
		say(OBJBTF_TOO_BIG, NULL, 0);
		python(1);
	}
	signal(SIGINT, SIG_DFL);        /* killed quietly; the server's child stops */
	n = reply(sock, buf, sizeof(buf));
	if (n == 0)
		python(0);              /* the server went away before taking it */
	if (n == LEN(OBJBTF_REPLY_FALLBACK) && !memcmp(buf, OBJBTF_REPLY_FALLBACK, n))
		python(1);
	if (n >= (ssize_t)LEN(OBJBTF_REPLY_CONFINED)
	    && !memcmp(buf, OBJBTF_REPLY_CONFINED, LEN(OBJBTF_REPLY_CONFINED))) {
		say(OBJBTF_NOT_CONFINED_AS_SERVER, buf + LEN(OBJBTF_REPLY_CONFINED),
		    (int)(n - LEN(OBJBTF_REPLY_CONFINED)));
		python(1);
	}
	if (n == LEN(OBJBTF_REPLY_OK) && !memcmp(buf, OBJBTF_REPLY_OK, n)) {
		n = reply(sock, buf, sizeof(buf));
		if (n == LEN(OBJBTF_REPLY_EXIT) + 4
		    && !memcmp(buf, OBJBTF_REPLY_EXIT, LEN(OBJBTF_REPLY_EXIT)))
			return (uint8_t)buf[4] | (uint8_t)buf[5] << 8 | (uint8_t)buf[6] << 16
			       | (uint32_t)(uint8_t)buf[7] << 24;
	}
	/* the command and its last argument (the file of encode and link) */
	fprintf(stderr, "objbtf: %s%s%s: the resident server's process for this command "
		"ended without an exit status\n", args[0], nargs > 1 ? " " : "",
		nargs > 1 ? args[nargs - 1] : "");
	return 1;
}
