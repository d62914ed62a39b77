/*
 * goodput: where the learners' time goes (docs/status.md, goodput).
 *
 * Counted in steps, per learner, each step of fragment p weighted by p's
 * share of the parameters (so a step counts once over all P fragments),
 * and turned into seconds with the learner's own wall time per step: the
 * time between its reports in which its step moved (gaps over
 * GP_GAP_S excepted), over the steps it moved by (its reported step time
 * until it has GP_MIN_ACTIVE_S of it).
 *
 * Per learner and fragment the syncer keeps the last step it counted
 * (counted_to) and the last step that reached Θ (merged_to). An answer
 * for p at step s carrying n steps covers the steps (s − n, s]: those
 * trained since the learner last applied an update of p. Then:
 *   overwritten  steps in (counted_to, s − n]: trained after the previous
 *                answer for p and wiped when the update of p was applied
 *   merged       steps in (counted_to, s] of a merged answer, plus those
 *                of the previous unmerged answer it carries again
 *   merged_again steps in (s − n, merged_to] of a merged answer: merged
 *                a second time (they count once in merged)
 *   late, refused  steps in (counted_to, s] of an answer that came after
 *                its round, or was refused, counted empty or screened out
 *   restarts     steps between the last counted one and the last step the
 *                learner reported, when it comes back as a new process
 *   trained      every step the learners reported, restarts included
 * Shares are of capacity = M × the seconds since this syncer process
 * started; not_training = 1 − trained / capacity (learners starting,
 * down, or not yet joined); in_flight = trained and not yet in any
 * answer. goodput is merged over M × elapsed (goodput_ratio).
 *
 * The state is its own: the core (core.c) calls in with what it learnt,
 * and writes nothing here but through these calls.
 */
#ifndef DDILOCO_SYNCER_GOODPUT_H
#define DDILOCO_SYNCER_GOODPUT_H

#include <jansson.h>
#include <stdint.h>

enum gp_fate { GP_MERGED, GP_LATE, GP_REFUSED };

struct gp_frag {
	int have;
	int last_fate;               /* of the last unmerged answer */
	double counted_to, merged_to, last_amt;
};

/* Per learner: steps by where they went (weighted by fragment share). */
struct gp_learner {
	int have;
	uint64_t incarnation;
	double step;                 /* the last step counted as trained */
	double t_rep;                /* when it was reported */
	double active;               /* wall seconds in which steps moved */
	double trained, merged, late, refused, overwritten, restarts;
	double merged_again;
	double step_time;            /* the step time it last reported */
};

struct goodput {
	int M, P;
	const double *share;         /* P: each fragment's share of the
				      * parameters (the caller's) */
	struct gp_frag *f;           /* M × P, learner-major */
	struct gp_learner *l;        /* M */
	double start;                /* elapsed when this process started */
	double merged_base;          /* compute_merged when it started */
	int stopped;                 /* the job is done: nothing counts */
};

/* Shares of capacity (see the head comment); capacity in learner-s. */
struct gp_shares {
	double capacity;
	double merged, late, refused, overwritten, restarts, merged_again;
	double not_training, in_flight;
};

/*
 * M learners, P fragments whose shares of the parameters are share[]
 * (kept by the caller for the goodput's life); start: the elapsed time
 * when this process started, merged_base the learner-seconds merged
 * before it (the checkpoint's).
 */
int goodput_init(struct goodput *g, int M, int P, const double *share,
		 double start, double merged_base);
void goodput_release(struct goodput *g);
/* The job is done: from now on nothing is counted, as elapsed stops. */
void goodput_stop(struct goodput *g);
/* Learner id joined at now with this incarnation, resuming at `resume`. */
void goodput_join(struct goodput *g, int id, uint64_t incarnation,
		  uint64_t resume, double now);
/* Learner id reported step (Heartbeat or Answer) at now; step_time > 0:
 * the step time it reported with it; incarnation its process's, 0 when
 * the report has none (an answer). The first one after a join with 0 is
 * its learner attaching; another is a new process, a join at step. */
void goodput_progress(struct goodput *g, int id, uint64_t incarnation,
		      uint64_t step, double step_time, double now);
/* Learner id's answer for fragment p, at step, with steps, had this fate. */
void goodput_answer(struct goodput *g, int id, int p, uint64_t step,
		    uint64_t steps, enum gp_fate fate);
/* The shares of capacity M × (elapsed − start); xi_step, the learners'
 * step time, for a learner with no wall time of its own yet. */
void goodput_shares(const struct goodput *g, double elapsed, double xi_step,
		    struct gp_shares *out);
/* Learner-seconds merged since this process started. */
double goodput_merged_seconds(const struct goodput *g, double xi_step);
/* Learner id's steps by where they went, as shares of the steps it
 * trained (all 0 before it trained one): "fates" of /status's learners. */
json_t *goodput_learner_json(const struct goodput *g, int id);
/* "goodput_breakdown" of /status: goodput_shares as JSON. */
json_t *goodput_json(const struct goodput *g, double elapsed, double xi_step);
/* goodput = merged learner-seconds (with merged_base) over M × elapsed. */
double goodput_ratio(const struct goodput *g, double elapsed, double xi_step);

#endif
