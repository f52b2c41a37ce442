/* Checks POSIX file API semantics on an nvmfs prefix under the preload library.
 * Usage: api PREFIX SELF   (SELF: path of this binary, for exec tests)
 * Prints one line per failed check and "checks: N passed, M failed" at the end; exit status
 * is 1 if any check failed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <spawn.h>
#include <unistd.h>

static int passed, failed;
#define CHECK(cond) do { if (cond) passed++; else { failed++; \
    printf("FAIL %s:%d: %s (errno %d %s)\n", __FILE__, __LINE__, #cond, errno, strerror(errno)); } } while (0)
#define CHECK_ERR(expr, e) do { errno = 0; long r_ = (long)(expr); CHECK(r_ == -1 && errno == (e)); } while (0)

static char P[512];
static const char *path(const char *rel) {
    static char buf[8][PATH_MAX];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "%s/%s", P, rel);
    return buf[i];
}

static void put(const char *p, const char *s) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
    CHECK(close(fd) == 0);
}

static char *get(const char *p) {
    static char buf[4096];
    int fd = open(p, O_RDONLY);
    if (fd < 0) return NULL;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return NULL;
    buf[n] = 0;
    return buf;
}

static void basics(void) {
    struct stat st;
    CHECK(stat(P, &st) == 0 && S_ISDIR(st.st_mode) && st.st_ino == 1);
    CHECK(mkdir(path("d"), 0755) == 0);
    CHECK_ERR(mkdir(path("d"), 0755), EEXIST);
    CHECK_ERR(mkdir(P, 0755), EEXIST);
    put(path("d/f"), "hello");
    CHECK(strcmp(get(path("d/f")), "hello") == 0);
    CHECK(stat(path("d/f"), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 5 && st.st_nlink == 1);
    CHECK_ERR(open(path("d/none"), O_RDONLY), ENOENT);
    CHECK_ERR(open(path("d/f/x"), O_RDONLY), ENOTDIR);
    CHECK_ERR(open(path("d"), O_WRONLY), EISDIR);
    CHECK_ERR(open(path("d/f"), O_RDONLY | O_DIRECTORY), ENOTDIR);
    CHECK_ERR(open(path("d/f"), O_CREAT | O_EXCL | O_WRONLY, 0600), EEXIST);
    CHECK_ERR(rmdir(path("d")), ENOTEMPTY);
    CHECK_ERR(unlink(path("d")), EISDIR);
    CHECK_ERR(rmdir(P), EBUSY);

    /* offsets, append, pread/pwrite, truncate */
    int fd = open(path("d/g"), O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789", 10) == 10);
    CHECK(lseek(fd, 0, SEEK_CUR) == 10);
    CHECK(lseek(fd, 2, SEEK_SET) == 2);
    char b[16] = {0};
    CHECK(read(fd, b, 3) == 3 && memcmp(b, "234", 3) == 0);
    CHECK(pwrite(fd, "AB", 2, 8) == 2);
    CHECK(pread(fd, b, 10, 0) == 10 && memcmp(b, "01234567AB", 10) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 5);
    CHECK(lseek(fd, 0, SEEK_END) == 10);
    CHECK(lseek(fd, 20, SEEK_SET) == 20 && write(fd, "z", 1) == 1);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 21);
    CHECK(pread(fd, b, 4, 10) == 4 && memcmp(b, "\0\0\0\0", 4) == 0);
    CHECK(ftruncate(fd, 4) == 0 && fstat(fd, &st) == 0 && st.st_size == 4);
    CHECK_ERR(lseek(fd, -1, SEEK_SET), EINVAL);
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    CHECK(pwritev(fd, iov, 2, 4) == 4);
    char x1[3] = {0}, x2[3] = {0};
    struct iovec riov[2] = {{x1, 2}, {x2, 2}};
    CHECK(preadv(fd, riov, 2, 4) == 4 && strcmp(x1, "ab") == 0 && strcmp(x2, "cd") == 0);
    CHECK(close(fd) == 0);
    CHECK_ERR(close(fd), EBADF);
    CHECK(truncate(path("d/g"), 2) == 0 && strcmp(get(path("d/g")), "01") == 0);

    fd = open(path("d/g"), O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    CHECK(lseek(fd, 0, SEEK_SET) == 0 && write(fd, "xy", 2) == 2);
    CHECK(lseek(fd, 0, SEEK_CUR) == 4);
    CHECK((fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND)) == (O_WRONLY | O_APPEND));
    CHECK(fcntl(fd, F_SETFL, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0 && write(fd, "Q", 1) == 1);
    CHECK_ERR(read(fd, b, 1), EBADF);
    close(fd);
    CHECK(strcmp(get(path("d/g")), "Q1xy") == 0);

    /* dup shares the offset; O_CLOEXEC goes on the real descriptor */
    fd = open(path("d/g"), O_RDONLY | O_CLOEXEC);
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    int fd2 = dup(fd);
    CHECK(fd2 > fd && (fcntl(fd2, F_GETFD) & FD_CLOEXEC) == 0);
    CHECK(read(fd, b, 2) == 2 && lseek(fd2, 0, SEEK_CUR) == 2);
    int fd3 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    CHECK(fd3 >= 100 && read(fd3, b, 1) == 1 && lseek(fd, 0, SEEK_CUR) == 3);
    CHECK(dup2(fd, 50) == 50 && lseek(fd2, 0, SEEK_SET) == 0 && lseek(50, 0, SEEK_CUR) == 0);
    close(fd);
    close(fd3);
    CHECK(read(50, b, 4) == 4 && memcmp(b, "Q1xy", 4) == 0);
    close(50);
    close(fd2);
}

static void names(void) {
    struct stat st;
    put(path("a"), "A");
    put(path("b"), "B");
    CHECK(rename(path("a"), path("b")) == 0);
    CHECK(strcmp(get(path("b")), "A") == 0);
    CHECK_ERR(stat(path("a"), &st), ENOENT);
    CHECK(link(path("b"), path("c")) == 0 && stat(path("b"), &st) == 0 && st.st_nlink == 2);
    CHECK_ERR(link(path("d"), path("dl")), EPERM);
    CHECK(renameat2(AT_FDCWD, path("b"), AT_FDCWD, path("c"), RENAME_NOREPLACE) == -1 && errno == EEXIST);
    CHECK(unlink(path("c")) == 0 && stat(path("b"), &st) == 0 && st.st_nlink == 1);
    CHECK_ERR(rename(path("b"), "/tmp/nvmfs-api-test-cross"), EXDEV);
    CHECK_ERR(link(path("b"), "/tmp/nvmfs-api-test-cross"), EXDEV);

    /* symlinks: relative, absolute into the prefix, absolute out of it, loops */
    CHECK(symlink("d/f", path("rel")) == 0);
    CHECK(strcmp(get(path("rel")), "hello") == 0);
    char abs[PATH_MAX];
    snprintf(abs, sizeof abs, "%s/d/f", P);
    CHECK(symlink(abs, path("abs")) == 0 && strcmp(get(path("abs")), "hello") == 0);
    char buf[PATH_MAX];
    ssize_t n = readlink(path("abs"), buf, sizeof buf);
    CHECK(n == (ssize_t)strlen(abs) && memcmp(buf, abs, n) == 0);
    CHECK(symlink("/etc", path("out")) == 0);
    CHECK(stat(path("out/hostname"), &st) == 0 || errno == ENOENT);
    struct stat real;
    CHECK(stat("/etc", &real) == 0 && stat(path("out"), &st) == 0 && st.st_ino == real.st_ino && st.st_dev == real.st_dev);
    CHECK(lstat(path("out"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(symlink("loop2", path("loop1")) == 0 && symlink("loop1", path("loop2")) == 0);
    CHECK_ERR(open(path("loop1"), O_RDONLY), ELOOP);
    CHECK_ERR(open(path("rel"), O_RDONLY | O_NOFOLLOW), ELOOP);
    /* ".." at the image root is the prefix's real parent */
    char up[PATH_MAX];
    snprintf(up, sizeof up, "%s/d/../..", P);
    char *pp = strdup(P);
    char *slash = strrchr(pp, '/');
    if (slash == pp) slash[1] = 0; else *slash = 0;
    struct stat parent;
    CHECK(stat(pp, &parent) == 0 && stat(up, &st) == 0 && st.st_ino == parent.st_ino && st.st_dev == parent.st_dev);
    free(pp);
    /* odd spellings: doubled slashes, ".", a symlink inside the path, a file as a directory */
    CHECK(symlink("d", path("dl")) == 0);
    snprintf(buf, sizeof buf, "%s//d/./f", P);
    CHECK(stat(buf, &st) == 0 && st.st_size == 5);
    CHECK(stat(path("dl/f"), &st) == 0 && st.st_size == 5);
    CHECK(stat(path("dl/../d//f"), &st) == 0 && st.st_size == 5);
    CHECK(stat(path("d/."), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_ERR(stat(path("d/f/"), &st), ENOTDIR);
    CHECK_ERR(stat(path("d/f/."), &st), ENOTDIR);
    CHECK_ERR(stat(path("dl/f/g"), &st), ENOTDIR);
    char rp1[PATH_MAX];
    CHECK(realpath(path("dl//./f"), rp1) && strcmp(rp1, path("d/f")) == 0);
    CHECK(unlink(path("dl")) == 0);
    /* dangling symlink: O_CREAT creates its target */
    CHECK(symlink("made", path("dangle")) == 0);
    int fd = open(path("dangle"), O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0);
    close(fd);
    CHECK(stat(path("made"), &st) == 0 && S_ISREG(st.st_mode));

    /* realpath, getcwd, chdir, relative paths */
    char rp[PATH_MAX];
    snprintf(abs, sizeof abs, "%s/d/f", P);
    CHECK(realpath(path("rel"), rp) && strcmp(rp, abs) == 0);
    CHECK(chdir(path("d")) == 0);
    char cwd[PATH_MAX];
    snprintf(abs, sizeof abs, "%s/d", P);
    CHECK(getcwd(cwd, sizeof cwd) && strcmp(cwd, abs) == 0);
    CHECK(strcmp(get("f"), "hello") == 0);
    CHECK(strcmp(get("./../d/f"), "hello") == 0);
    put("rel-made", "r");
    CHECK(stat(path("d/rel-made"), &st) == 0);
    CHECK(realpath("f", rp) && strcmp(rp, path("d/f")) == 0);
    CHECK(chdir("..") == 0 && getcwd(cwd, sizeof cwd) && strcmp(cwd, P) == 0);
    int dfd = open("d", O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0 && fchdir(dfd) == 0 && getcwd(cwd, sizeof cwd) && strcmp(cwd, abs) == 0);
    CHECK(faccessat(dfd, "f", R_OK, 0) == 0 && fstatat(dfd, "f", &st, 0) == 0 && st.st_size == 5);
    int ffd = openat(dfd, "f", O_RDONLY);
    CHECK(ffd >= 0);
    close(ffd);
    close(dfd);
    CHECK(chdir("/") == 0);

    /* unlink while open: the data stays until the last close */
    put(path("tmp"), "still here");
    fd = open(path("tmp"), O_RDWR);
    CHECK(unlink(path("tmp")) == 0);
    char b[32] = {0};
    CHECK(pread(fd, b, sizeof b, 0) == 10 && strcmp(b, "still here") == 0);
    CHECK(fstat(fd, &st) == 0 && st.st_nlink == 0);
    close(fd);
}

static int cmpname(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static void dirs(void) {
    CHECK(mkdir(path("ls"), 0755) == 0);
    for (int i = 0; i < 50; i++) {
        char n[64];
        snprintf(n, sizeof n, "ls/file%02d", i);
        put(path(n), "x");
    }
    CHECK(mkdir(path("ls/sub"), 0700) == 0);
    DIR *d = opendir(path("ls"));
    CHECK(d != NULL);
    int files = 0, dirs = 0, dots = 0;
    long mid = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) { dots++; continue; }
        if (e->d_type == DT_DIR) dirs++;
        if (e->d_type == DT_REG) files++;
        if (files == 25 && mid < 0) mid = telldir(d);
    }
    CHECK(files == 50 && dirs == 1 && dots == 2);
    seekdir(d, mid);
    int rest = 0;
    while ((e = readdir(d))) rest++;
    CHECK(rest == 26);
    rewinddir(d);
    int again = 0;
    while (readdir(d)) again++;
    CHECK(again == 53);
    struct stat st;
    CHECK(fstat(dirfd(d), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(closedir(d) == 0);
    struct dirent **list;
    int n = scandir(path("ls"), &list, NULL, cmpname);
    CHECK(n == 53 && strcmp(list[2]->d_name, "file00") == 0 && strcmp(list[52]->d_name, "sub") == 0);
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
    int fd = open(path("ls"), O_RDONLY | O_DIRECTORY);
    d = fdopendir(fd);
    CHECK(d && dirfd(d) == fd);
    int cnt = 0;
    while (readdir(d)) cnt++;
    CHECK(cnt == 53);
    closedir(d);
    CHECK_ERR(fcntl(fd, F_GETFD), EBADF);
    /* getdents64 */
    fd = open(path("ls"), O_RDONLY | O_DIRECTORY);
    char buf[1024];
    long total = 0, got;
    while ((got = getdents64(fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < got;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            total++;
            off += reclen;
        }
    }
    CHECK(got == 0 && total == 53);
    close(fd);
}

static void stdio_calls(void) {
    FILE *f = fopen(path("s.txt"), "w");
    CHECK(f != NULL);
    CHECK(fileno(f) >= 0);
    struct stat st;
    CHECK(fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode));
    for (int i = 0; i < 1000; i++) fprintf(f, "line %d\n", i);
    CHECK(fclose(f) == 0);
    f = fopen(path("s.txt"), "r");
    char line[64];
    int n = 0;
    while (fgets(line, sizeof line, f)) n++;
    CHECK(n == 1000);
    CHECK(fseek(f, 5, SEEK_SET) == 0 && fgets(line, sizeof line, f) && strcmp(line, "0\n") == 0);
    CHECK(ftell(f) == 7);
    fclose(f);
    f = fopen(path("s.txt"), "a+");
    fputs("tail\n", f);
    fclose(f);
    CHECK(stat(path("s.txt"), &st) == 0 && st.st_size == 8890 + 5);
    int fd = open(path("s.txt"), O_RDONLY);
    f = fdopen(fd, "r");
    CHECK(f && fileno(f) == fd && fgets(line, sizeof line, f) && strcmp(line, "line 0\n") == 0);
    fclose(f);
    CHECK_ERR(fcntl(fd, F_GETFD), EBADF);
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX", P);
    fd = mkstemp(tmpl);
    CHECK(fd >= 0 && strncmp(tmpl, P, strlen(P)) == 0 && stat(tmpl, &st) == 0 && (st.st_mode & 0777) == 0600);
    close(fd);
    snprintf(tmpl, sizeof tmpl, "%s/dirXXXXXX", P);
    CHECK(mkdtemp(tmpl) && stat(tmpl, &st) == 0 && S_ISDIR(st.st_mode));
    f = fopen(path("nope/x"), "r");
    CHECK(f == NULL && errno == ENOENT);
}

static void attrs(void) {
    struct stat st;
    put(path("m"), "m");
    CHECK(chmod(path("m"), 0640) == 0 && stat(path("m"), &st) == 0 && (st.st_mode & 07777) == 0640);
    CHECK(chown(path("m"), 12, 34) == 0 && stat(path("m"), &st) == 0 && st.st_uid == 12 && st.st_gid == 34);
    struct timespec ts[2] = {{1000, 5}, {2000, 7}};
    CHECK(utimensat(AT_FDCWD, path("m"), ts, 0) == 0);
    CHECK(stat(path("m"), &st) == 0 && st.st_atim.tv_sec == 1000 && st.st_mtim.tv_sec == 2000 && st.st_mtim.tv_nsec == 7);
    struct statx sx;
    CHECK(statx(AT_FDCWD, path("m"), 0, STATX_BASIC_STATS, &sx) == 0 && sx.stx_size == 1 && sx.stx_mtime.tv_sec == 2000);
    CHECK(access(path("m"), R_OK | W_OK) == 0);
    CHECK_ERR(access(path("m"), X_OK), EACCES);
    CHECK_ERR(access(path("missing"), F_OK), ENOENT);
    struct statvfs sv;
    CHECK(statvfs(P, &sv) == 0 && sv.f_bsize == 4096 && sv.f_blocks > 0 && sv.f_bfree <= sv.f_blocks);
    int fd = open(path("m"), O_RDWR);
    CHECK(fallocate(fd, 0, 0, 10000) == 0 && fstat(fd, &st) == 0 && st.st_size == 10000);
    CHECK(posix_fallocate(fd, 0, 20000) == 0 && fstat(fd, &st) == 0 && st.st_size == 20000);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    close(fd);
    CHECK(mknod(path("fifo"), S_IFIFO | 0644, 0) == 0 && stat(path("fifo"), &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK_ERR(open(path("fifo"), O_RDONLY | O_NONBLOCK), ENXIO);
    CHECK(unlink(path("fifo")) == 0);
}

static void processes(const char *self) {
    /* fork shares the description (offset) */
    put(path("shared"), "abcdef");
    int fd = open(path("shared"), O_RDONLY);
    pid_t pid = fork();
    if (pid == 0) {
        char b[2];
        _exit(read(fd, b, 2) == 2 && b[0] == 'a' ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 2);
    /* exec inherits the descriptor and its offset */
    pid = fork();
    if (pid == 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", fd);
        execl(self, self, P, "--child-read", num, (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 4);
    close(fd);
    /* a child's cwd inside nvmfs survives exec */
    pid = fork();
    if (pid == 0) {
        if (chdir(path("d")) != 0) _exit(2);
        execl(self, self, P, "--child-cwd", (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* flock and fcntl locks conflict across processes */
    fd = open(path("shared"), O_RDWR);
    CHECK(flock(fd, LOCK_EX) == 0);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
    pid = fork();
    if (pid == 0) {
        int f2 = open(path("shared"), O_RDWR);
        int ok = flock(f2, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK;
        struct flock g = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
        ok = ok && fcntl(f2, F_SETLK, &g) == -1 && (errno == EAGAIN || errno == EACCES);
        g.l_type = F_WRLCK;
        ok = ok && fcntl(f2, F_GETLK, &g) == 0 && g.l_type == F_WRLCK && g.l_pid == getppid();
        _exit(ok ? 0 : 1);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fd);
    /* a program stored in nvmfs cannot be executed; a script can */
    put(path("prog"), "\177ELF not really");
    chmod(path("prog"), 0755);
    CHECK_ERR(execl(path("prog"), "prog", (char *)NULL), EACCES);
    put(path("script"), "#!/bin/sh\necho script-ran > \"$1\"\n");
    chmod(path("script"), 0755);
    pid = fork();
    if (pid == 0) {
        execl(path("script"), "script", path("script-out"), (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *out = get(path("script-out"));
    CHECK(out && strcmp(out, "script-ran\n") == 0);
}

/* Waits for a byte on pipe `sync`, then reads 2 bytes at the description's offset from `fd`:
 * they must be "cd". For a process that shares a description with one that closes its
 * copy and opens another file meanwhile. */
static int wait_read_cd(int fd, int sync) {
    char b[2], go;
    if (read(sync, &go, 1) != 1) return 3;
    return read(fd, b, 2) == 2 && b[0] == 'c' && b[1] == 'd' ? 0 : 1;
}

/* Starts this program with posix_spawn to read "cd" from `fd` once told; meanwhile closes
 * `fd` and opens and reads another file (open flags `oflags`), which must not take the
 * description the child holds. */
static void spawn_reader_then_reopen(const char *self, int fd, int oflags) {
    int sync[2], status;
    CHECK(pipe(sync) == 0);
    char a1[16], a2[16], b[4];
    snprintf(a1, sizeof a1, "%d", fd);
    snprintf(a2, sizeof a2, "%d", sync[0]);
    char *argv[] = {(char *)self, P, "--child-wait-read", a1, a2, NULL};
    extern char **environ;
    pid_t pid;
    CHECK(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
    CHECK(close(fd) == 0);
    int fd2 = open(path("two"), oflags);
    CHECK(read(fd2, b, 3) == 3 && b[0] == 'a');
    CHECK(write(sync[1], "x", 1) == 1);
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(close(fd2) == 0);
    close(sync[0]);
    close(sync[1]);
}

/* Descriptors numbered `from` or above that this process has open (the preload's spares
 * live at 512 and up). */
static int open_from(int from) {
    int n = 0;
    for (int fd = from; fd < from + 1024; fd++) n += fcntl(fd, F_GETFD) != -1 || errno != EBADF;
    return n;
}

/* A description closed with nothing else holding it is kept for the next open (the
 * preload's spares): that open must start afresh, the old file must be free to go, and a
 * description another process still holds must never be reused. */
static void reuse(const char *self) {
    struct statvfs before, after;
    CHECK(statvfs(P, &before) == 0);
    int fd = open(path("big"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    static char block[65536];
    for (int i = 0; i < 16; i++) CHECK(write(fd, block, sizeof block) == (ssize_t)sizeof block);
    CHECK(close(fd) == 0);
    /* its last link goes: nothing holds it open, so its 256 blocks are free at once (the
     * directory may keep a block it grew) */
    CHECK(unlink(path("big")) == 0);
    CHECK(statvfs(P, &after) == 0 && after.f_bfree + 16 > before.f_bfree);
    put(path("one"), "0123456789");
    put(path("two"), "abcdef");
    fd = open(path("one"), O_RDWR | O_APPEND | O_CLOEXEC);
    char b[8];
    CHECK(read(fd, b, 4) == 4 && lseek(fd, 0, SEEK_CUR) == 4);
    CHECK(close(fd) == 0);
    int fd2 = open(path("two"), O_RDONLY | O_CLOEXEC);
    CHECK(fd2 == fd);
    CHECK((fcntl(fd2, F_GETFL) & (O_ACCMODE | O_APPEND)) == O_RDONLY);
    CHECK((fcntl(fd2, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(lseek(fd2, 0, SEEK_CUR) == 0 && read(fd2, b, 3) == 3 && memcmp(b, "abc", 3) == 0);
    CHECK(close(fd2) == 0);
    int fd3 = open(path("one"), O_RDONLY);
    CHECK((fcntl(fd3, F_GETFD) & FD_CLOEXEC) == 0 && read(fd3, b, 2) == 2 && b[0] == '0');
    CHECK(close(fd3) == 0);
    /* a forked child holds the description: the parent's close must not reuse it */
    put(path("cd"), "cdcd");
    int sync[2];
    CHECK(pipe(sync) == 0);
    fd = open(path("cd"), O_RDONLY | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) _exit(wait_read_cd(fd, sync[0]));
    CHECK(close(fd) == 0);
    fd2 = open(path("two"), O_RDONLY | O_CLOEXEC);
    CHECK(read(fd2, b, 3) == 3 && b[0] == 'a');
    CHECK(write(sync[1], "x", 1) == 1);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(close(fd2) == 0);
    close(sync[0]);
    close(sync[1]);
    /* nor when a duplicate without close-on-exec went to a spawned program */
    fd = open(path("cd"), O_RDONLY | O_CLOEXEC);
    int keep = dup(fd);
    CHECK(keep >= 0 && close(fd) == 0);
    spawn_reader_then_reopen(self, keep, O_RDONLY | O_CLOEXEC);
    /* files held open while others open and close: the spares (idle, or held by open
     * descriptors for their close) stay at most MAX_SPARES (spares.rs), and each file reads as
     * itself */
    enum { MAX_SPARES = 64, HELD = MAX_SPARES + 16 };
    int many[HELD];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < HELD; i++) CHECK((many[i] = open(path(i % 2 ? "one" : "two"), O_RDONLY | O_CLOEXEC)) >= 0);
        for (int i = 0; i < HELD; i++) {
            int t = open(path("two"), O_RDONLY | O_CLOEXEC);
            CHECK(t >= 0 && close(t) == 0);
        }
        for (int i = 0; i < HELD; i++) CHECK(pread(many[i], b, 1, 0) == 1 && b[0] == (i % 2 ? '0' : 'a'));
        CHECK(open_from(512) <= MAX_SPARES + 2);
        for (int i = 0; i < HELD; i++) CHECK(close(many[i]) == 0);
    }
    CHECK(open_from(512) <= MAX_SPARES + 2);
    /* a program out of descriptor numbers still opens an nvmfs file: the idle spares give
     * theirs back */
    struct rlimit lim, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &lim) == 0);
    low = lim;
    low.rlim_cur = 600;
    CHECK(open_from(512) >= 8 && setrlimit(RLIMIT_NOFILE, &low) == 0);
    int fill[600], filled = 0;
    while (filled < 600 && (fill[filled] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) filled++;
    CHECK(filled < 600 && errno == EMFILE);
    int last = open(path("one"), O_RDONLY | O_CLOEXEC);
    CHECK(last >= 0 && pread(last, b, 1, 0) == 1 && b[0] == '0');
    /* left at 512 and above besides the program's own: the spare the open took */
    int left = open_from(512) - (last >= 512);
    for (int i = 0; i < filled; i++) left -= fill[i] >= 512;
    if (left > 3) fprintf(stderr, "descriptors left at 512 and above: %d\n", left);
    CHECK(left <= 2);
    if (last >= 0) close(last);
    while (filled > 0) close(fill[--filled]);
    CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0);
}

/* A descriptor opened without O_CLOEXEC is close-on-exec in the kernel until something
 * could pass it on (so its description can be reused at close): the program must still
 * see it as it opened it, and every way of starting a program must pass it on. */
static void inherit(const char *self) {
    char cmd[1200];
    int fd = open(path("cd"), O_RDONLY);
    CHECK(fd >= 0 && fcntl(fd, F_GETFD) == 0);
    /* a duplicate and its source both keep across exec; system and popen start their
     * shell inside the C library */
    int d = dup2(fd, 40);
    CHECK(d == 40 && fcntl(d, F_GETFD) == 0 && fcntl(fd, F_GETFD) == 0);
    CHECK(close(d) == 0);
    snprintf(cmd, sizeof cmd, "'%s' '%s' --child-read %d", self, P, fd);
    CHECK(system(cmd) == 0);
    CHECK(close(fd) == 0);
    fd = open(path("cd"), O_RDONLY);
    snprintf(cmd, sizeof cmd, "'%s' '%s' --child-read %d", self, P, fd);
    CHECK(system(cmd) == 0);
    CHECK(close(fd) == 0);
    fd = open(path("cd"), O_RDONLY);
    snprintf(cmd, sizeof cmd, "'%s' '%s' --child-read %d", self, P, fd);
    FILE *p = popen(cmd, "r");
    CHECK(p && pclose(p) == 0);
    CHECK(close(fd) == 0);
    /* posix_spawn with no file actions; the parent's close and next open meanwhile must
     * not reuse the description the child holds */
    spawn_reader_then_reopen(self, open(path("cd"), O_RDONLY), O_RDONLY);
    /* exec with no fork in between passes it on; one made close-on-exec (F_SETFD, FIOCLEX,
     * close_range) does not reach the new program */
    int status;
    pid_t pid = fork();
    if (pid == 0) {
        int keep = open(path("cd"), O_RDONLY);
        int c1 = open(path("cd"), O_RDONLY), c2 = open(path("cd"), O_RDONLY), c3 = open(path("cd"), O_RDONLY);
        if (fcntl(c1, F_SETFD, FD_CLOEXEC) != 0 || fcntl(c1, F_GETFD) != FD_CLOEXEC) _exit(5);
        if (ioctl(c2, FIOCLEX) != 0 || fcntl(c2, F_GETFD) != FD_CLOEXEC) _exit(6);
        if (close_range(c3, c3, CLOSE_RANGE_CLOEXEC) != 0 || fcntl(c3, F_GETFD) != FD_CLOEXEC) _exit(7);
        char k[16], n1[16], n2[16], n3[16];
        snprintf(k, sizeof k, "%d", keep);
        snprintf(n1, sizeof n1, "%d", c1);
        snprintf(n2, sizeof n2, "%d", c2);
        snprintf(n3, sizeof n3, "%d", c3);
        execl(self, self, P, "--child-exec-fds", k, n1, n2, n3, (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* --child-exec-fds: the first descriptor reads "cd", the others are closed. */
static int child_exec_fds(char **fds, int n) {
    char b[2];
    int fd = atoi(fds[0]);
    if (read(fd, b, 2) != 2 || b[0] != 'c') return 1;
    for (int i = 1; i < n; i++)
        if (fcntl(atoi(fds[i]), F_GETFD) != -1 || errno != EBADF) return 10 + i;
    return 0;
}

static void permissions(void) {
    if (getuid() != 0) return;
    put(path("secret"), "s");
    chmod(path("secret"), 0600);
    put(path("public"), "p");
    chmod(path("public"), 0644);
    CHECK(mkdir(path("open"), 0777) == 0 && chmod(path("open"), 0777) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        int bad = 0;
        errno = 0;
        if (!(open(path("secret"), O_RDONLY) == -1 && errno == EACCES)) bad |= 1;
        if (!(access(path("public"), W_OK) == -1 && errno == EACCES)) bad |= 2;
        if (access(path("public"), R_OK) != 0) bad |= 4;
        if (!(open(path("public"), O_WRONLY) == -1 && errno == EACCES)) bad |= 8;
        if (!(mkdir(path("d/no"), 0755) == -1 && errno == EACCES)) bad |= 16;
        if (!(chmod(path("public"), 0777) == -1 && errno == EPERM)) bad |= 32;
        if (!(unlink(path("public")) == -1 && errno == EACCES)) bad |= 64;
        int fd = open(path("open/mine"), O_WRONLY | O_CREAT, 0644);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || st.st_uid != 65534 || st.st_gid != 65534) bad |= 128;
        _exit(bad);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (WIFEXITED(status) && WEXITSTATUS(status)) printf("permission checks: bits %d\n", WEXITSTATUS(status));
}

static void maps(void) {
    int fd = open(path("map"), O_RDWR | O_CREAT, 0644);
    CHECK(ftruncate(fd, 3 * 4096) == 0);
    char *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED) return;
    memcpy(m + 4090, "across-blocks", 13);
    CHECK(msync(m, 3 * 4096, MS_SYNC) == 0);
    char b[16] = {0};
    CHECK(pread(fd, b, 13, 4090) == 13 && memcmp(b, "across-blocks", 13) == 0);
    CHECK(pwrite(fd, "WRITE", 5, 100) == 5 && memcmp(m + 100, "WRITE", 5) == 0);
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 4096);
    CHECK(p != MAP_FAILED && memcmp(p, m + 4096, 16) == 0);
    if (p != MAP_FAILED) {
        p[0] = 'P';
        CHECK(m[4096] != 'P');
        CHECK(munmap(p, 4096) == 0);
    }
    pid_t pid = fork();
    if (pid == 0) {
        memcpy(m + 200, "child", 5);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(pread(fd, b, 5, 200) == 5 && memcmp(b, "child", 5) == 0);
    CHECK(munmap(m, 3 * 4096) == 0);
    close(fd);
    CHECK(unlink(path("map")) == 0);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    snprintf(P, sizeof P, "%s", argv[1]);
    if (argc >= 4 && !strcmp(argv[2], "--child-read")) {
        int fd = atoi(argv[3]);
        char b[2];
        return read(fd, b, 2) == 2 && b[0] == 'c' && b[1] == 'd' ? 0 : 1;
    }
    if (argc >= 4 && !strcmp(argv[2], "--child-exec-fds")) return child_exec_fds(argv + 3, argc - 3);
    if (argc >= 5 && !strcmp(argv[2], "--child-wait-read")) return wait_read_cd(atoi(argv[3]), atoi(argv[4]));
    if (argc >= 3 && !strcmp(argv[2], "--child-cwd")) {
        char cwd[PATH_MAX];
        return getcwd(cwd, sizeof cwd) && !strcmp(cwd, path("d")) && get("f") && !strcmp(get("f"), "hello") ? 0 : 1;
    }
    basics();
    names();
    dirs();
    stdio_calls();
    attrs();
    processes(argv[0]);
    reuse(argv[0]);
    inherit(argv[0]);
    permissions();
    maps();
    printf("checks: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
