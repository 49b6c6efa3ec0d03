"""Personalization strategies as TFF 0.87's users write them for
`build_personalization_eval_computation` (a `VariableModel`, Keras
optimizers, `forward_pass`, metric variables reset by hand), a
`VariableModel` written as TFF's docs write one, the weights they start
from and three clients' data; TFF 0.87's results on them are in
tests/canonical/learning/test_tff_personalization_eval.py."""

import collections

import numpy as np
import tensorflow as tf

import canonical as tff


class LinearModel(tff.learning.models.VariableModel):
  """Multinomial logistic regression on 4 features, 3 classes, written as
  TFF's docs write a VariableModel."""

  def __init__(self):
    self._kernel = tf.Variable(tf.zeros([4, 3]), name='kernel')
    self._bias = tf.Variable(tf.zeros([3]), name='bias')
    self._num_examples = tf.Variable(0, trainable=False)
    self._loss_sum = tf.Variable(0.0, trainable=False)
    self._correct = tf.Variable(0.0, trainable=False)

  @property
  def trainable_variables(self):
    return [self._kernel, self._bias]

  @property
  def non_trainable_variables(self):
    return []

  @property
  def local_variables(self):
    return [self._num_examples, self._loss_sum, self._correct]

  @property
  def input_spec(self):
    return (tf.TensorSpec([None, 4], tf.float32),
            tf.TensorSpec([None], tf.int32))

  def predict_on_batch(self, x, training=True):
    del training
    return tf.matmul(x, self._kernel) + self._bias

  def forward_pass(self, batch_input, training=True):
    x, y = batch_input
    logits = self.predict_on_batch(x, training)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    num_examples = tf.shape(y)[0]
    self._num_examples.assign_add(num_examples)
    self._loss_sum.assign_add(loss * tf.cast(num_examples, tf.float32))
    predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
    self._correct.assign_add(
        tf.reduce_sum(tf.cast(tf.equal(predicted, y), tf.float32)))
    return tff.learning.models.BatchOutput(
        loss=loss, predictions=logits, num_examples=num_examples)

  def report_local_unfinalized_metrics(self):
    count = tf.cast(self._num_examples, tf.float32)
    return collections.OrderedDict(
        num_examples=self._num_examples.read_value(),
        loss=[self._loss_sum.read_value(), count],
        accuracy=[self._correct.read_value(), count])

  def metric_finalizers(self):
    return collections.OrderedDict(
        num_examples=lambda n: n,
        loss=lambda sums: sums[0] / sums[1],
        accuracy=lambda sums: sums[0] / sums[1])

  def reset_metrics(self):
    for variable in self.local_variables:
      variable.assign(tf.zeros_like(variable))


def p13n_data():
  rng = np.random.default_rng(5)

  def client(n_train, n_test):

    def dataset(n):
      x = rng.normal(size=(n, 4)).astype(np.float32)
      y = (x[:, 0] > 0).astype(np.int32)
      return tf.data.Dataset.from_tensor_slices((x, y))

    return collections.OrderedDict(train_data=dataset(n_train),
                                   test_data=dataset(n_test))

  return [client(6, 4), client(5, 3), client(4, 5)]


def evaluate_fn(model, dataset, batch_size=2):
  for variable in model.local_variables:
    variable.assign(tf.zeros_like(variable))

  def reduce_fn(num_examples_sum, batch):
    output = model.forward_pass(batch, training=False)
    return num_examples_sum + output.num_examples

  dataset.batch(batch_size).reduce(0, reduce_fn)
  unfinalized = model.report_local_unfinalized_metrics()
  return collections.OrderedDict(
      (name, finalizer(unfinalized[name]))
      for name, finalizer in model.metric_finalizers().items())


def build_personalize_fn(optimizer_fn, batch_size, num_epochs):
  optimizer = optimizer_fn()

  @tf.function
  def personalize_fn(model, train_data, test_data, context=None):
    del context

    def train_one_batch(num_examples_sum, batch):
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch)
      grads = tape.gradient(output.loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
      return num_examples_sum + output.num_examples

    training_state = 0
    for _ in range(num_epochs):
      training_state = train_data.batch(batch_size).reduce(
          initial_state=training_state, reduce_func=train_one_batch)
    metrics = evaluate_fn(model, test_data)
    metrics['num_train_examples'] = training_state
    return metrics

  return personalize_fn


PERSONALIZE_FN_DICT = collections.OrderedDict(
    sgd=lambda: build_personalize_fn(
        lambda: tf.keras.optimizers.SGD(learning_rate=0.5), batch_size=2,
        num_epochs=2),
    adam=lambda: build_personalize_fn(
        lambda: tf.keras.optimizers.Adam(learning_rate=0.1), batch_size=3,
        num_epochs=1))
WEIGHTS = tff.learning.models.ModelWeights(
    trainable=[np.array([[0.5, -0.5, 0.0], [0.1, 0.0, -0.1], [0.0, 0.2, 0.0],
                         [-0.3, 0.0, 0.3]], np.float32),
               np.array([0.1, 0.0, -0.1], np.float32)],
    non_trainable=[])
