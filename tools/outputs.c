/* bench's output destinations, checked first, and its plots (outputs.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "outputs.h"

/* The directory part of path ("." where there is none). */
static void dir_of(const char *path, char *dir, size_t len)
{
    snprintf(dir, len, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, len, ".");
    else if (slash == dir) dir[1] = 0; /* "/file" */
    else *slash = 0;
}

int fw_output_check_file(const char *flag, const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, err_len, "%s %s: is a directory; give a file name", flag, path);
            return 2;
        }
        if (access(path, W_OK) != 0) {
            snprintf(err, err_len, "%s %s: cannot be written: %s", flag, path, strerror(errno));
            return 2;
        }
        return 0;
    }
    char dir[1024];
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_len, "%s %s: the directory %s does not exist", flag, path, dir);
        return 2;
    }
    if (access(dir, W_OK) != 0) {
        snprintf(err, err_len, "%s %s: the directory %s is not writable", flag, path, dir);
        return 2;
    }
    return 0;
}

static int readable(const char *path) { return path[0] && access(path, R_OK) == 0; }

static void find_script(char *script, size_t len)
{
    const char *env = getenv("FLASHWATT_PLOT_SCRIPT");
    if (env && env[0]) {
        snprintf(script, len, "%s", env);
        return;
    }
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        /* a build directory of the checkout (build/flashwatt -> bench/plot.py), then an installed tree */
        snprintf(script, len, "%s/../bench/plot.py", exe);
        if (readable(script)) return;
        snprintf(script, len, "%s/../share/flashwatt/plot.py", exe);
        if (readable(script)) return;
    }
    snprintf(script, len, "bench/plot.py");
}

int fw_output_check_plot(const char *dir, char *script, size_t script_len, char *err, size_t err_len)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, err_len, "--plot %s: exists and is not a directory", dir);
            return 2;
        }
        if (access(dir, W_OK) != 0) {
            snprintf(err, err_len, "--plot %s: the directory is not writable", dir);
            return 2;
        }
    } else if (mkdir(dir, 0755) != 0) {
        snprintf(err, err_len, "--plot %s: cannot create the directory: %s", dir, strerror(errno));
        return 2;
    }
    find_script(script, script_len);
    if (!readable(script)) {
        snprintf(err, err_len, "--plot: cannot find the plot script (bench/plot.py beside the build, or "
                               "share/flashwatt/plot.py where installed); set FLASHWATT_PLOT_SCRIPT");
        return 2;
    }
    if (system("python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
        snprintf(err, err_len, "--plot needs python3 with matplotlib, which is not installed here: "
                               "python3 -m pip install matplotlib (scripts/bench.sh --plot installs it)");
        return 2;
    }
    return 0;
}

int fw_output_plot(const char *script, const char *json, const char *dir)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s'", script, json, dir);
    const int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "flashwatt bench: --plot: %s failed (status %d)\n", cmd, rc);
    else printf("plots written to %s\n", dir);
    return rc != 0;
}
