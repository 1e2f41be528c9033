/* The subcommands of the `flashwatt` command. Each takes the arguments after its name
 * (argv[0] is the subcommand name) and returns the process exit code:
 * 0 success, 1 failure (a check failed, a run errored), 2 usage error. */
#ifndef FW_TOOLS_COMMANDS_H
#define FW_TOOLS_COMMANDS_H

#include <stdio.h>

int fw_cmd_info(int argc, char **argv);    /* tools/cmd_info.c */
int fw_cmd_check(int argc, char **argv);   /* tools/cmd_check.c */
int fw_cmd_bench(int argc, char **argv);   /* tools/cmd_bench.c */
int fw_cmd_monitor(int argc, char **argv); /* tools/cmd_monitor.c */
int fw_cmd_tune(int argc, char **argv);    /* tools/cmd_tune.c */

/* Usage texts (tools/main.c). */
void fw_usage(FILE *f);
void fw_usage_check(FILE *f);
void fw_usage_bench(FILE *f);
void fw_usage_tune(FILE *f); /* tools/cmd_tune.c */

#endif
