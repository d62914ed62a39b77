/*
 * slowdown: a learner made slower on purpose, spec.learners.slowdown
 * (docs/run.md, Slow learners): after a step that took `seconds` of its
 * own work, it waits (factor − 1) · seconds, so that it steps at 1/factor
 * of its speed, as a learner on slower hardware would. The C learner,
 * the synthetic learner and the ABI's ddiloco_poll call it.
 */
#ifndef DDILOCO_SLOWDOWN_H
#define DDILOCO_SLOWDOWN_H

#include "common/util.h"

/* The step's time with the wait, after the wait. */
static inline double slowdown_step(double factor, double seconds)
{
	if (!(factor > 1) || !(seconds > 0))
		return seconds;
	sleep_seconds((factor - 1) * seconds);
	return factor * seconds;
}

#endif
