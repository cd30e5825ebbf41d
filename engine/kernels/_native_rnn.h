/* The recurrent family's entry points (_native_rnn.c), for _native.c's method table. */
#ifndef SGLENS_NATIVE_RNN_H
#define SGLENS_NATIVE_RNN_H

#include "_native.h"

PyObject *native_rnn_directions(PyObject *self, PyObject *args);
PyObject *native_lstm_step_f32(PyObject *self, PyObject *args);

#define NATIVE_RNN_METHODS \
    {"rnn_directions", native_rnn_directions, METH_VARARGS, \
     "rnn_directions(dirs): the RNN, GRU or LSTM recurrence of each direction\n" \
     "(see _native_rnn.c), the GIL released; h and c updated in place, ys written."}, \
    {"lstm_step_f32", native_lstm_step_f32, METH_VARARGS, \
     "lstm_step_f32(x, h, c, wr, bias, y): one streaming LSTM step (see _native_rnn.c)."},

#endif
