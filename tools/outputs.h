/* bench's output destinations (--csv, --json, --plot), checked before the run so that a typo or a
 * missing plotting library fails in a second instead of after the whole run, and the plots. */
#ifndef FW_TOOLS_OUTPUTS_H
#define FW_TOOLS_OUTPUTS_H

#include <stddef.h>

/* 0 when `path` can be written (its directory exists and is writable; an existing path is a writable
 * regular file), else 2 with a message naming the flag in err. */
int fw_output_check_file(const char *flag, const char *path, char *err, size_t err_len);

/* --plot DIR: creates DIR where it is missing, finds the plot script (FLASHWATT_PLOT_SCRIPT, bench/plot.py
 * beside the build or the installed share/flashwatt/plot.py, ./bench/plot.py) into script, and checks that
 * python3 with matplotlib is there. 0, or 2 with what is missing and how to get it in err. */
int fw_output_check_plot(const char *dir, char *script, size_t script_len, char *err, size_t err_len);

/* Runs the plot script on json into dir; 0 on success. */
int fw_output_plot(const char *script, const char *json, const char *dir);

#endif
