#include <math.h>
#include <string.h>

typedef struct {
    int n, m, n_ang, K, W, depth, P, n_l, act;
    int friction;             /* law: 0 none, 1 coulomb_viscous, 2 stribeck (friction.py) */
    const int *feat;          /* (n,) feature index of joint i: sin (angular) or raw (prismatic) */
    const int *is_ang;        /* (n,) */
    const int *rows, *cols;   /* (n_l,) row/col of each L entry */
    const double *w_in;       /* (K, m, W) */
    const double *w_hid;      /* (depth-1, K, W, W) */
    const double *bias;       /* (depth, K, W) */
    const double *head;       /* (K, W, P), masked */
    const double *head_b;     /* (P,) */
    const double *friction_coef;  /* (F, n): F = 5 for stribeck, else 2 (zeros for none) */
    const double *root;       /* (n_l,) scale of each L entry: sqrt(h_scale h_rel[row]) */
    double v_scale, eps, diag_offset, inv_smooth;
} delan_t;

static inline void act(int kind, double a, double *h, double *d) {
    if (kind == 1) { double t = tanh(a); *h = t; *d = 1.0 - t * t; return; }
    /* softplus and its slope (the logistic), overflow-safe */
    if (a > 0) { double e = exp(-a); *h = a + log1p(e); *d = 1.0 / (1.0 + e); }
    else { double e = exp(a); *h = log1p(e); *d = e / (1.0 + e); }
}

/* tau_f of joint i (of n) at velocity qd, the arithmetic of friction.py's friction_torque,
 * with t = tanh(qd / eps) and coef's rows (b, fc) for law 1, (b, fc+, fc-, s, vs) for law 2:
 *   1: b qd + fc t
 *   2: b qd + fc(t) (1 + s exp(-(qd / vs)^2)) t,  fc(t) = ((fc+ + fc-) + (fc+ - fc-) t) / 2 */
static inline double friction_torque(int law, const double *coef, int n, int i, double qd,
                                     double inv_smooth) {
    if (law == 0) return 0.0;
    double t = tanh(qd * inv_smooth);
    if (law == 1) return coef[i] * qd + coef[n + i] * t;
    double pos = coef[n + i], neg = coef[2 * n + i], x = qd / coef[4 * n + i];
    double level = 0.5 * ((pos + neg) + (pos - neg) * t);
    return coef[i] * qd + level * (1.0 + coef[3 * n + i] * exp(-(x * x))) * t;
}

int delan_inverse(const delan_t *M, const double *q, const double *qd, const double *qdd,
                  double *tau) {
    const int n = M->n, m = M->m, K = M->K, W = M->W, D = M->depth, P = M->P, nl = M->n_l;
    const int KW = K * W;
    double z[m], dz[m], s[n], c[n], gz[m];
    double h[D][KW], d[D][KW];
    double a[KW], t[W], t2[W], g[KW], g2[KW];
    double out[P], ldot[P], l[P], slope[P], gout[P];
    double u[n], x[n], lin[n];

    for (int i = 0; i < n; i++) {
        int f = M->feat[i];
        if (M->is_ang[i]) {
            s[i] = sin(q[i]); c[i] = cos(q[i]);
            z[f] = s[i]; z[f + M->n_ang] = c[i];
            dz[f] = c[i] * qd[i]; dz[f + M->n_ang] = -s[i] * qd[i];
        } else { s[i] = c[i] = 0.0; z[f] = q[i]; dz[f] = qd[i]; }
    }
    /* forward pass of the K networks */
    for (int k = 0; k < K; k++) {
        const double *w = M->w_in + (size_t)k * m * W, *b = M->bias + (size_t)k * W;
        for (int j = 0; j < W; j++) a[j] = b[j];
        for (int i = 0; i < m; i++) { double zi = z[i]; const double *wr = w + (size_t)i * W;
            for (int j = 0; j < W; j++) a[j] += zi * wr[j]; }
        for (int j = 0; j < W; j++) act(M->act, a[j], &h[0][k * W + j], &d[0][k * W + j]);
        for (int L = 1; L < D; L++) {
            const double *wl = M->w_hid + ((size_t)(L - 1) * K + k) * W * W;
            const double *bl = M->bias + ((size_t)L * K + k) * W;
            for (int j = 0; j < W; j++) a[j] = bl[j];
            for (int i = 0; i < W; i++) {
                double hi = h[L - 1][k * W + i]; const double *wr = wl + (size_t)i * W;
                for (int j = 0; j < W; j++) a[j] += hi * wr[j]; }
            for (int j = 0; j < W; j++) act(M->act, a[j], &h[L][k * W + j], &d[L][k * W + j]);
        }
    }
    for (int p = 0; p < P; p++) out[p] = M->head_b[p];
    for (int k = 0; k < K; k++) for (int j = 0; j < W; j++) {
        double hj = h[D - 1][k * W + j]; const double *hr = M->head + ((size_t)k * W + j) * P;
        for (int p = 0; p < P; p++) out[p] += hj * hr[p]; }
    /* tangent pass of network 0 */
    for (int j = 0; j < W; j++) t[j] = 0.0;
    for (int i = 0; i < m; i++) { double v = dz[i]; const double *wr = M->w_in + (size_t)i * W;
        for (int j = 0; j < W; j++) t[j] += v * wr[j]; }
    for (int j = 0; j < W; j++) t[j] *= d[0][j];
    for (int L = 1; L < D; L++) {
        const double *wl = M->w_hid + (size_t)(L - 1) * K * W * W;
        for (int j = 0; j < W; j++) t2[j] = 0.0;
        for (int i = 0; i < W; i++) { double v = t[i]; const double *wr = wl + (size_t)i * W;
            for (int j = 0; j < W; j++) t2[j] += v * wr[j]; }
        for (int j = 0; j < W; j++) t[j] = t2[j] * d[L][j];
    }
    for (int p = 0; p < P; p++) ldot[p] = 0.0;
    for (int j = 0; j < W; j++) { double v = t[j]; const double *hr = M->head + (size_t)j * P;
        for (int p = 0; p < nl; p++) ldot[p] += v * hr[p]; }
    /* L's entries, their slopes and rates */
    for (int e = 0; e < nl; e++) {
        if (e < n) { double sp, sg; act(0, out[e], &sp, &sg);
            l[e] = (sp + M->diag_offset) * M->root[e]; slope[e] = sg * M->root[e]; }
        else { l[e] = out[e] * M->root[e]; slope[e] = M->root[e]; }
        ldot[e] *= slope[e];
    }
    /* u = L^T qd, x = L^T qdd + Ldot^T qd, lin = L x + Ldot u */
    for (int i = 0; i < n; i++) u[i] = x[i] = lin[i] = 0.0;
    for (int e = 0; e < nl; e++) { int r = M->rows[e], cc = M->cols[e];
        u[cc] += l[e] * qd[r]; x[cc] += l[e] * qdd[r] + ldot[e] * qd[r]; }
    for (int e = 0; e < nl; e++) { int r = M->rows[e], cc = M->cols[e];
        lin[r] += l[e] * x[cc] + ldot[e] * u[cc];
        gout[e] = -(qd[r] * u[cc]) * slope[e]; }
    for (int p = nl; p < P; p++) gout[p] = M->v_scale;
    /* reverse pass: d/dq (V - 1/2 qd^T H qd) */
    for (int i = 0; i < m; i++) gz[i] = 0.0;
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < W; j++) { const double *hr = M->head + ((size_t)k * W + j) * P;
            double acc = 0.0; for (int p = 0; p < P; p++) acc += gout[p] * hr[p];
            g[j] = acc * d[D - 1][k * W + j]; }
        for (int L = D - 1; L >= 1; L--) {
            const double *wl = M->w_hid + ((size_t)(L - 1) * K + k) * W * W;
            for (int i = 0; i < W; i++) { const double *wr = wl + (size_t)i * W; double acc = 0.0;
                for (int j = 0; j < W; j++) acc += g[j] * wr[j];
                g2[i] = acc * d[L - 1][k * W + i]; }
            memcpy(g, g2, sizeof(double) * W);
        }
        const double *w = M->w_in + (size_t)k * m * W;
        for (int i = 0; i < m; i++) { const double *wr = w + (size_t)i * W; double acc = 0.0;
            for (int j = 0; j < W; j++) acc += g[j] * wr[j];
            gz[i] += acc; }
    }
    for (int i = 0; i < n; i++) {
        int f = M->feat[i];
        double dq = M->is_ang[i] ? c[i] * gz[f] - s[i] * gz[f + M->n_ang] : gz[f];
        double fr = friction_torque(M->friction, M->friction_coef, n, i, qd[i], M->inv_smooth);
        tau[i] = lin[i] + M->eps * qdd[i] + dq + fr;
    }
    for (int i = 0; i < n; i++) if (!isfinite(tau[i])) return 1;
    return 0;
}
