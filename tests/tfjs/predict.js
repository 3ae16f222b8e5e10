// A TensorFlow.js graph model (the folder tensorflowjs_converter wrote: model.json and its weight shards)
// loaded with @tensorflow/tfjs in Node, as a browser app loads it, and asked for a batch of inputs:
//   node predict.js MODEL_FOLDER INPUTS.json OUTPUTS.json
// The outputs file gets each of the signature's outputs by name. Node reads the files itself (tfjs's
// file:// loader is tfjs-node's, whose native library downloads from outside the package registries).
const fs = require("fs");
const path = require("path");
const tf = require("@tensorflow/tfjs");

async function main() {
  const [folder, inputsFile, outputsFile] = process.argv.slice(2);
  const model = JSON.parse(fs.readFileSync(path.join(folder, "model.json"), "utf8"));
  const weightSpecs = [];
  const shards = [];
  for (const group of model.weightsManifest) {
    weightSpecs.push(...group.weights);
    for (const shard of group.paths) shards.push(fs.readFileSync(path.join(folder, shard)));
  }
  const bytes = Buffer.concat(shards);
  const graph = await tf.loadGraphModel(tf.io.fromMemory({
    modelTopology: model.modelTopology, weightSpecs,
    weightData: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
    format: model.format, generatedBy: model.generatedBy, convertedBy: model.convertedBy,
    signature: model.signature, userDefinedMetadata: model.userDefinedMetadata,
  }));
  const inputs = tf.tensor(JSON.parse(fs.readFileSync(inputsFile, "utf8")), undefined, "float32");
  const names = Object.keys(model.signature.outputs);
  let results = graph.execute({ inputs }, names);
  if (!Array.isArray(results)) results = [results];
  const answer = {};
  names.forEach((name, i) => { answer[name] = results[i].arraySync(); });
  fs.writeFileSync(outputsFile, JSON.stringify(answer));
}

main().catch((err) => { console.error(err); process.exit(1); });
