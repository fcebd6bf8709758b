/*
 * The part values of a message whose stored events are sends and consume attempts paired by request
 * id, in C: what collector.store.rollup._part_values gives for its events, {(topic, minute): value},
 * the value being collector/store/rollup_parts.py's encoding of its part in the minute it is placed
 * in and MOVED (b"") in every other minute one of its events could have placed it in.
 *
 * Included by _readback.c, after its msgpack reader (it reads that file's Fields); it writes with the
 * mp_put_* of collector/_c/msgpack_rw.h. It models rollup_parts._placed_groups for the common shapes
 * only: events of type PUB, SUB_BEFORE, SUB_AFTER and DEAD, every consume with a request id, at most
 * PART_MAX_EVENTS events and request ids of at most PART_MAX_RID characters. Anything else (END_TX,
 * REPLAY, an id-less consume, a latency or minute beyond 64 bits...) answers FALLBACK and the Python
 * path, which stays the definition, computes the part. tests/collector/store/test_partof.py checks
 * both paths against each other.
 */
#ifndef TRACEHOOK_PARTOF_H
#define TRACEHOOK_PARTOF_H

enum { SUB_BEFORE = 2, SUB_AFTER = 3, DEAD = 5 }; /* wire.EventType (PUB is _readback.c's) */
enum { STATUS_OK = 0, STATUS_RETRY_LATER = 4 }; /* wire.Status */
/* rollup_parts._OUTCOMES */
enum { CONSUMED_CODE = 0, RETRYING_CODE = 1, FAILED_CODE = 2, DEAD_CODE = 3, PENDING_CODE = 4 };
enum { PART_MAX_EVENTS = 32, PART_MAX_RID = 64 };

/* The constants above, added to the dict of the including module's layout() (tests/collector/store/
   test_readback_layout.py compares them with wire.py and rollup_parts.py); -1 with an exception set. */
static int partof_layout(PyObject *d) {
    PyObject *v = Py_BuildValue("{s:{s:i,s:i,s:i},s:{s:i,s:i},s:(iiiii)}", "part_event_types", "SUB_BEFORE",
                                SUB_BEFORE, "SUB_AFTER", SUB_AFTER, "DEAD", DEAD, "part_statuses", "OK", STATUS_OK,
                                "RETRY_LATER", STATUS_RETRY_LATER, "outcome_codes", CONSUMED_CODE, RETRYING_CODE,
                                FAILED_CODE, DEAD_CODE, PENDING_CODE);
    int rc = v ? PyDict_Update(d, v) : -1;
    Py_XDECREF(v);
    return rc;
}

/* bytes order (memcmp, shorter first on a tie): how Python orders bytes, and str by their UTF-8. */
static int text_cmp(const unsigned char *a, Py_ssize_t an, const unsigned char *b, Py_ssize_t bn) {
    int c = an && bn ? memcmp(a, b, (size_t)(an < bn ? an : bn)) : 0;
    return c ? c : (an > bn) - (an < bn);
}

/* schema.message_time: store, else born, else event time. */
static int64_t message_time(const Fields *ev) {
    return ev->store > 0 ? ev->store : ev->born > 0 ? ev->born : ev->time;
}

/* schema.minute_of (Python's modulo: never negative); 0 when it is beyond 64 bits. */
static int minute_of(int64_t ms, int64_t minute_ms, int64_t *minute) {
    return !__builtin_sub_overflow(ms, (ms % minute_ms + minute_ms) % minute_ms, minute);
}

/* model.could_place: a send, or a consume or dead event that knew the store time. */
static int could_place(const Fields *ev) {
    return ev->type == PUB || ((ev->type == SUB_BEFORE || ev->type == DEAD) && ev->store > 0);
}

/* An event in the order a message's events are read in (model.event_order), with its request id as text. */
typedef struct {
    const Fields *ev;
    const unsigned char *rid;
    Py_ssize_t rid_n;
} Ordered;

static int event_cmp(const Ordered *a, const Ordered *b) {
    if (a->ev->time != b->ev->time) return a->ev->time < b->ev->time ? -1 : 1;
    if (a->ev->type != b->ev->type) return a->ev->type < b->ev->type ? -1 : 1;
    return text_cmp(a->rid, a->rid_n, b->rid, b->rid_n);
}

/* One consume attempt (model.pair_attempts): its SUB_BEFORE and SUB_AFTER (NULL when missing). */
typedef struct {
    const Ordered *before, *after;
    int group; /* index in the message's groups */
} Attempt;

static const Ordered *first_of(const Attempt *a) { return a->before ? a->before : a->after; }

/* A (topic, minute) a message's part is filed under. */
typedef struct {
    const Obj *topic;
    int64_t minute;
} Place;

static int same_place(const Place *a, const Place *b) {
    return a->minute == b->minute && text_cmp(a->topic->s, a->topic->n, b->topic->s, b->topic->n) == 0;
}

/* (topic, minute) as a dict key, out of the cyclic GC (a str and an int cannot reach back: a batch's
   read-back keeps hundreds of thousands of these until its parts are written). */
static PyObject *place_key(const Place *place) {
    PyObject *topic = str_of(place->topic), *minute = PyLong_FromLongLong(place->minute), *key = NULL;
    if (topic && minute && (key = PyTuple_Pack(2, topic, minute))) PyObject_GC_UnTrack(key);
    Py_XDECREF(topic), Py_XDECREF(minute);
    return key;
}

/* The index of a group in the message's groups (in the order first seen), added when new. */
static int group_index(const Obj **groups, int *n_groups, const Obj *group) {
    int g = 0;
    while (g < *n_groups && text_cmp(groups[g]->s, groups[g]->n, group->s, group->n) != 0) g++;
    if (g == *n_groups) groups[(*n_groups)++] = group;
    return g;
}

/* One group's (outcome code, retried, latency) as _placed_groups gives it without replays; its attempts
   in the order seen, whether it dead-lettered the message and when last. FALLBACK when the latency is
   beyond 64 bits. */
static int group_outcome(Attempt **attempts, int count, int dead, int64_t last_dead, int64_t placed, int *code,
                         int *retried, int64_t *latency, int *has_latency) {
    for (int i = 1; i < count; i++) { /* a stable sort by the time of each attempt's first event */
        Attempt *a = attempts[i];
        int j = i;
        for (; j > 0 && first_of(attempts[j - 1])->ev->time > first_of(a)->ev->time; j--) attempts[j] = attempts[j - 1];
        attempts[j] = a;
    }
    const Attempt *ok = NULL, *last = count ? attempts[count - 1] : NULL;
    for (int i = 0; i < count && !ok; i++)
        if (attempts[i]->after && attempts[i]->after->ev->status == STATUS_OK) ok = attempts[i];
    *has_latency = 0;
    if (dead) { /* final, unless "replayed" after it (model.outcome_of: never is time 0) and then consumed */
        int revived = 0;
        for (int i = 0; i < count && last_dead < 0 && !revived; i++) {
            const Attempt *a = attempts[i];
            revived = a->after && a->after->ev->status == STATUS_OK && first_of(a)->ev->time >= 0;
        }
        dead = !revived;
    }
    if (dead) *code = DEAD_CODE;
    else if (ok) {
        *code = CONSUMED_CODE;
        if (__builtin_sub_overflow(ok->after->ev->time, placed, latency)) return FALLBACK;
        if (*latency < 0) *latency = 0;
        *has_latency = 1;
    } else if (last->after) *code = last->after->ev->status == STATUS_RETRY_LATER ? RETRYING_CODE : FAILED_CODE;
    else *code = first_of(last)->ev->retry > 0 ? RETRYING_CODE : PENDING_CODE;
    *retried = count > 1 || *code == RETRYING_CODE;
    return 0;
}

/* The part values of a message from its n (>= 1) stored events' Fields, in the order of its row's
   cells, into *out (a new dict); FALLBACK when a shape is not modelled, ERR with an exception set. */
static int part_values(const Fields *evs, int n, int64_t version, int64_t minute_ms, PyObject **out) {
    Ordered ordered[PART_MAX_EVENTS];
    unsigned char hex[PART_MAX_EVENTS][PART_MAX_RID];
    static const char digits[] = "0123456789abcdef";
    if (n < 1 || n > PART_MAX_EVENTS) return FALLBACK;
    for (int i = 0; i < n; i++) {
        const Fields *ev = &evs[i];
        Ordered o = {ev, ev->request.s, ev->request.n};
        if (ev->type != PUB && ev->type != SUB_BEFORE && ev->type != SUB_AFTER && ev->type != DEAD) return FALLBACK;
        if (ev->request.kind == O_BIN) { /* schema keeps a hex id as the bytes it spells: its text again */
            if (2 * ev->request.n > PART_MAX_RID) return FALLBACK;
            for (Py_ssize_t k = 0; k < ev->request.n; k++)
                hex[i][2 * k] = digits[ev->request.s[k] >> 4], hex[i][2 * k + 1] = digits[ev->request.s[k] & 15];
            o.rid = hex[i], o.rid_n = 2 * ev->request.n;
        }
        if ((ev->type == SUB_BEFORE || ev->type == SUB_AFTER) && o.rid_n == 0)
            return FALLBACK; /* id-less consumes pair by time: Python's */
        int j = i; /* a stable insertion sort: sorted(events, key=event_order) */
        for (; j > 0 && event_cmp(&ordered[j - 1], &o) > 0; j--) ordered[j] = ordered[j - 1];
        ordered[j] = o;
    }
    const Ordered *ok_send = NULL, *last_send = NULL, *first_placer = NULL;
    const Obj *groups[PART_MAX_EVENTS];
    int dead[PART_MAX_EVENTS] = {0}; /* per group: whether it dead-lettered the message, */
    int64_t last_dead[PART_MAX_EVENTS]; /* and when last */
    Attempt attempts[PART_MAX_EVENTS];
    Place places[PART_MAX_EVENTS];
    int n_groups = 0, n_attempts = 0, n_places = 0, consumes = 0, deads = 0;
    for (int i = 0; i < n; i++) { /* one pass, as _placed_groups's */
        const Ordered *o = &ordered[i];
        const Fields *ev = o->ev;
        if (ev->type == PUB) {
            last_send = o;
            if (!ok_send && ev->status == STATUS_OK) ok_send = o;
        } else if (ev->type == DEAD) {
            int g = group_index(groups, &n_groups, &ev->group);
            if (!dead[g] || ev->time > last_dead[g]) last_dead[g] = ev->time;
            dead[g] = 1;
            deads++;
        } else {
            int g = group_index(groups, &n_groups, &ev->group), after = ev->type == SUB_AFTER;
            consumes++;
            Attempt *found = NULL; /* model._open_attempt with a request id: the group's last open one */
            for (int a = n_attempts - 1; a >= 0 && !found; a--) {
                Attempt *at = &attempts[a];
                const Ordered *side = after ? at->after : at->before, *first = first_of(at);
                if (at->group == g && !side && text_cmp(first->rid, first->rid_n, o->rid, o->rid_n) == 0) found = at;
            }
            if (!found) found = &attempts[n_attempts++], *found = (Attempt){NULL, NULL, g};
            *(after ? &found->after : &found->before) = o;
        }
        if (could_place(ev)) {
            Place place = {&ev->topic, 0};
            if (!minute_of(message_time(ev), minute_ms, &place.minute)) return FALLBACK;
            if (!first_placer) first_placer = o;
            int seen = 0;
            for (int p = 0; p < n_places && !seen; p++) seen = same_place(&places[p], &place);
            if (!seen) places[n_places++] = place;
        }
    }
    const Ordered *send = ok_send ? ok_send : last_send, *placing = send ? send : first_placer;
    PyObject *values = PyDict_New(), *key = NULL, *value = NULL;
    if (!values) return ERR;
    Place here = {NULL, 0};
    if (placing) {
        int64_t placed = message_time(placing->ev);
        here.topic = &placing->ev->topic;
        if (!minute_of(placed, minute_ms, &here.minute)) goto fallback;
        int order[PART_MAX_EVENTS]; /* the groups by name */
        Py_ssize_t size = 1 + 3 + 2 * 9 + 1;
        for (int g = 0; g < n_groups; g++) {
            int j = g;
            for (; j > 0; j--) {
                const Obj *before = groups[order[j - 1]];
                if (text_cmp(before->s, before->n, groups[g]->s, groups[g]->n) <= 0) break;
                order[j] = order[j - 1];
            }
            order[j] = g;
            size += 5 + groups[g]->n + 1 + 1 + 9;
        }
        if (!(value = PyBytes_FromStringAndSize(NULL, size))) goto error;
        unsigned char *start = (unsigned char *)PyBytes_AS_STRING(value), *w = start;
        int length = 3 + 4 * n_groups; /* [version, placed ms, stored, (group, code, retried, latency)...] */
        w += mp_put_array(w, (uint64_t)length);
        w += mp_put_int(w, version);
        w += mp_put_int(w, placed);
        *w++ = send && send->ev->status != STATUS_OK && !consumes && !deads ? 0xc2 : 0xc3; /* not never_stored */
        for (int k = 0; k < n_groups; k++) {
            int g = order[k], count = 0, code, retried, has_latency;
            int64_t latency;
            Attempt *mine[PART_MAX_EVENTS];
            for (int a = 0; a < n_attempts; a++)
                if (attempts[a].group == g) mine[count++] = &attempts[a];
            if (group_outcome(mine, count, dead[g], last_dead[g], placed, &code, &retried, &latency, &has_latency) < 0)
                goto fallback;
            w += mp_put_str(w, groups[g]->s, groups[g]->n);
            *w++ = (unsigned char)code;
            *w++ = retried ? 0xc3 : 0xc2;
            if (has_latency) w += mp_put_int(w, latency);
            else *w++ = 0xc0;
        }
        if (_PyBytes_Resize(&value, w - start) < 0 || !(key = place_key(&here)) ||
            PyDict_SetItem(values, key, value) < 0)
            goto error;
        Py_CLEAR(key);
        Py_CLEAR(value);
    }
    for (int p = 0; p < n_places; p++) { /* MOVED in every other minute it could have been placed in */
        if (here.topic && same_place(&places[p], &here)) continue;
        if (!(key = place_key(&places[p])) || !(value = PyBytes_FromStringAndSize("", 0)) ||
            PyDict_SetItem(values, key, value) < 0)
            goto error;
        Py_CLEAR(key);
        Py_CLEAR(value);
    }
    *out = values;
    return 0;
fallback:
    Py_DECREF(values), Py_XDECREF(value);
    return FALLBACK;
error:
    Py_DECREF(values), Py_XDECREF(key), Py_XDECREF(value);
    return ERR;
}

#endif
