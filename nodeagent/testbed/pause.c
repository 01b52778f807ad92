/*
 * The pod sandbox's pause process, built into the testbed's pause image (see images.py).
 *
 * As the kubelet's pause container does: it holds the pod's namespaces open for as long as the sandbox lives, so it
 * must never exit on its own (if it did, CreateContainer would fail to join /proc/N/ns/...). It exits 0 on SIGINT or
 * SIGTERM, which is how the runtime stops a sandbox, and it reaps zombies on SIGCHLD because it is PID 1 of the pod
 * when the pod shares its PID namespace: orphans are re-parented to it.
 *
 * Built with `gcc -static -Os`, so the image needs no libc and no loader.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *message) {
    /* write(2) only: the handlers below run in signal context, where stdio is not safe. */
    ssize_t ignored = write(STDERR_FILENO, message, strlen(message));
    (void)ignored;
}

static void on_shutdown(int signo) {
    say(signo == SIGTERM ? "pause: shutting down on SIGTERM\n" : "pause: shutting down on SIGINT\n");
    _exit(0);
}

static void on_child(int signo) {
    int saved = errno;
    (void)signo;
    /* One SIGCHLD may stand for several exits: reap until none is left. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int install(int signo, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        say("pause: takes no arguments\n");
        return 2;
    }
    if (getpid() != 1) {
        say("pause: warning: not the first process of its PID namespace\n");
    }
    if (install(SIGINT, on_shutdown, 0) != 0 || install(SIGTERM, on_shutdown, 0) != 0 ||
        install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) != 0) {
        say("pause: sigaction failed\n");
        return 1;
    }
    for (;;) {
        pause();
    }
    /* Not reached: only a signal ends this process. */
    say("pause: the loop ended\n");
    return 42;
}
