/* Progress of a long step (progress.h): one watcher thread, started on the first step, sleeps until the
 * running step is due a line and prints it. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "progress.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int started, running, printed;
static char command[32], step[256];
static double step_start, first_after_s = 5.0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the clock pthread_cond_timedwait waits on */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!running) pthread_cond_wait(&changed, &lock);
        const double due = step_start + first_after_s * (1.0 + 2.0 * printed);
        const double t = now_s();
        if (t >= due) {
            fprintf(stderr, "flashwatt %s: %s: %.0f s so far\n", command, step, t - step_start);
            printed++;
            continue;
        }
        struct timespec until;
        until.tv_sec = (time_t)due;
        until.tv_nsec = (long)((due - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&changed, &lock, &until);
    }
    return NULL;
}

void fw_progress_begin(const char *cmd, const char *fmt, ...)
{
    pthread_mutex_lock(&lock);
    if (!started) {
        const char *env = getenv("FLASHWATT_PROGRESS_S");
        if (env && atof(env) > 0) first_after_s = atof(env);
        pthread_t t;
        if (pthread_create(&t, NULL, watch, NULL) == 0) pthread_detach(t);
        started = 1;
    }
    snprintf(command, sizeof command, "%s", cmd);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(step, sizeof step, fmt, ap);
    va_end(ap);
    step_start = now_s();
    running = 1;
    printed = 0;
    pthread_cond_signal(&changed);
    pthread_mutex_unlock(&lock);
}

void fw_progress_end(void)
{
    pthread_mutex_lock(&lock);
    if (running && printed) fprintf(stderr, "flashwatt %s: %s: done in %.0f s\n", command, step, now_s() - step_start);
    running = 0;
    pthread_cond_signal(&changed);
    pthread_mutex_unlock(&lock);
}
