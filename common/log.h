/*
 * log: one line per event on stderr, "<time> <level> <component>: <text>".
 *
 * The component is the process's role ("syncer", "learner-2", ...), set
 * once in the command's main with log_init. Levels below the threshold
 * (DDILOCO_LOG=debug|info|warn|error, default info) are dropped.
 */
#ifndef DDILOCO_LOG_H
#define DDILOCO_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_init(const char *component);
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
