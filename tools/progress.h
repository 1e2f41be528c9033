/* Progress of a long step on stderr, so that a command on a long problem does not look hung: while a
 * step runs, a line "flashwatt check: <step>: 12 s so far" after FLASHWATT_PROGRESS_S seconds (default
 * 5) and then every twice that long, and "<step>: done in 37 s" when a step that printed ends. Steps that end
 * sooner print nothing. */
#ifndef FW_TOOLS_PROGRESS_H
#define FW_TOOLS_PROGRESS_H

void fw_progress_begin(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fw_progress_end(void);

#endif
